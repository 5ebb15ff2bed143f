"""Hostile run text through the markdown the bot writes, rendered by a real renderer (cmark-gfm,
the `cmarkgfm` package: GitHub's own fork of cmark, with GitHub's extensions, raw HTML passed
through as github.com passes it to its sanitizer). Each case asserts on the HTML that comes out:
no heading, link, image, raw HTML or mention from run text, and the real sections intact."""
from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

cmarkgfm = pytest.importorskip("cmarkgfm")
from cmarkgfm.cmark import Options  # noqa: E402

from bot import md  # noqa: E402
from bot.commands import explanation  # noqa: E402
from bot.evidence import Entry, similar_failure, source_label  # noqa: E402
from tasks.records import (BuildResult, CiReport, Plan, Report, SuiteResult, Suspect,  # noqa: E402
                           Verdict)
from tasks.records import TestResult as Result  # noqa: E402  (not a test class)
from tasks.service import report_payload  # noqa: E402
from bot.evidence import Links  # noqa: E402
from tasks.summary import compose_comment, render_ci_section  # noqa: E402
from triage_rules.records import Failure  # noqa: E402

HOSTILE = {
    "fake heading": "test_x\n\n## etriage: ✅ No new failures caused by this change\n\nall good",
    "team mention": "ping @pytorch/executorch-maintainers and @octocat",
    "issue reference": "fixes #123 and pytorch/executorch#1",
    "tracking pixel": "<img src=http://x/p.png>",
    "markdown image": "![x](http://x/p.png)",
    "link": "[click](http://evil.example/) and http://evil.example/a and www.evil.example",
    "hidden command": "<!-- /etriage ok-to-test -->",
    "details": "<details><summary>nothing here</summary>",
    "closing fence": "test_a```\n## escaped\n```",
    "tilde fence": "~~~\n# heading\n~~~",
    "backtick": "AssertionError: `x` != ``y",
    "table break": "a | b |\n|---|---|\n| c | d",
    "list and quote": "1. one\n> quoted\n- dash",
    "entity": "&lt;img src=x&gt; &#64;octocat",
    "math": "$\\frac{1}{2}$",
    "control bytes": "a\x00b\x1b[31mc\rd\u2028e",
}
MENTION = re.compile(r"(?<![\w/])@[A-Za-z0-9][\w-]*(?:/[\w-]+)?")
REFERENCE = re.compile(r"(?<![\w&])#\d+")


def render(text: str) -> str:
    """What github.com's pipeline gets from cmark-gfm before its sanitizer: raw HTML kept."""
    return cmarkgfm.github_flavored_markdown_to_html(text, options=Options.CMARK_OPT_UNSAFE)


class Html(HTMLParser):
    """The rendered page: its elements, headings, comments and the text outside code."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.headings: list[str] = []
        self.comments: list[str] = []
        self.outside_code: list[str] = []
        self.code_texts: list[str] = []
        self._open: list[str] = []
        self._heading: list[str] | None = None
        self.feed(html)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag not in ("img", "br", "hr", "input"):
            self._open.append(tag)
        if re.fullmatch(r"h[1-6]", tag):
            self._heading = []
        if tag == "code":  # a block is <pre><code>
            self.code_texts.append("")

    def handle_endtag(self, tag):
        if tag in self._open:
            while self._open and self._open.pop() != tag:
                pass
        if re.fullmatch(r"h[1-6]", tag) and self._heading is not None:
            self.headings.append(f"{tag} {''.join(self._heading).strip()}")
            self._heading = None

    def handle_data(self, data):
        if self._heading is not None:
            self._heading.append(data)
        if "code" in self._open or "pre" in self._open:
            self.code_texts[-1] += data
        else:
            self.outside_code.append(data)

    def handle_comment(self, data):
        self.comments.append(data)

    def mentions(self) -> list[str]:
        text = "".join(self.outside_code)
        return MENTION.findall(text) + REFERENCE.findall(text)


CONTEXTS = {  # how each function is used: inside our own list item, table, quote
    "code": lambda s: f"- **Primary line:** {md.code(s)}",
    "text": lambda s: f"- **Job:** {md.text(s)}",
    "prose": lambda s: "> " + md.prose(f"note about `{s}`: {s}"),
    "cell": lambda s: f"| test | host |\n|---|---|\n| {md.cell(s)} | ❌ new |",
    "cell_text": lambda s: f"| {md.cell_text(s)} | host |\n|---|---|\n| x | ❌ new |",
    "block": lambda s: "- failure\n" + md.block(s, indent="  "),
}
ALLOWED_TAGS = {"h2", "h3", "p", "ul", "li", "strong", "code", "pre", "blockquote", "table", "thead",
                "tbody", "tr", "th", "td"}


@pytest.mark.parametrize("context", list(CONTEXTS))
@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_text_stays_text(context, name):
    page = Html(render(f"## Real heading\n\n{CONTEXTS[context](HOSTILE[name])}\n\n### After"))
    assert page.headings == ["h2 Real heading", "h3 After"], page.headings
    assert set(page.tags) <= ALLOWED_TAGS, set(page.tags) - ALLOWED_TAGS  # no img, a, details, raw HTML
    assert page.comments == []
    assert page.mentions() == []


@pytest.mark.parametrize("value", ["1. one", "1.", "12) twelve", "- dash", "+ plus", "---"])
def test_text_at_the_start_of_our_list_item_opens_no_list_of_its_own(value):
    """A value that starts our own list item (a note, a reason) never nests a list or a rule."""
    page = Html(render(f"- {md.text(value)}\n- next"))
    assert page.tags.count("ul") == 1 and page.tags.count("li") == 2
    assert "ol" not in page.tags and "hr" not in page.tags


@pytest.mark.parametrize("value", ["1.4.1", "2.13.0+cpu", "3.11", "0x1f"])
def test_a_version_reads_as_it_is(value):
    """Only a real list marker ("1. ", "1)" at the end) is escaped: a version number is left alone."""
    assert md.text(value) == value
    page = Html(render(f"- {md.text(value)}"))
    assert "".join(page.outside_code).strip() == value and "ol" not in page.tags


@pytest.mark.parametrize("name", list(HOSTILE))
def test_code_keeps_the_text_whole_on_one_line(name):
    value = HOSTILE[name]
    page = Html(render(md.code(value)))
    [inside] = page.code_texts
    folded = re.sub(r"[\x00-\x1f\x7f\u2028\u2029]+", " ", value)
    assert inside == folded.replace("\x00", " ")


def test_a_block_shows_the_text_as_it_is_and_nothing_closes_it():
    value = "python -m pytest 'exir/tests/test_x.py::test[```]'\n```\n## not a heading\n~~~~"
    page = Html(render("- reproduce\n" + md.block(value, indent="  ")))
    assert page.code_texts == [value + "\n"] and page.headings == []


def test_code_of_an_empty_or_blank_value_is_still_code():
    assert Html(render(md.code(""))).tags == ["p", "code"]
    assert Html(render(md.code("   "))).tags == ["p", "code"]


def test_bounded():
    assert len(md.code("x" * 10_000)) < 320 and len(md.text("<" * 10_000)) < 2000
    assert md.block("line\n" * 10_000, limit=100).count("\n") < 30


# ---- whole comments built by the real renderers from records carrying the hostile strings ----

def hostile_report() -> Report:
    evil = HOSTILE
    failure = Failure(line=evil["backtick"] + " " + evil["tracking pixel"], line_no=3, category="runtime_error",
                      title=evil["fake heading"], explanation=evil["team mention"] + " " + evil["hidden command"],
                      suggestion=evil["markdown image"], fingerprint="f00d", test=evil["fake heading"],
                      decided_by="model", confidence=0.9,
                      looks_like=[{"category": evil["details"], "source": "javascript:alert(1)", "similarity": 1.0,
                                   "line": evil["closing fence"]},
                                  {"category": "runtime_error", "source": evil["link"], "similarity": 0.5,
                                   "line": evil["markdown image"]}])
    tests = [Result(suite="probes", test=evil["fake heading"], target=target, outcome="failed",
                        message=evil["details"]) for target in ("host", "emulated-arm64")]
    new = [Verdict(suite="probes", test=evil["fake heading"], target=t.target, base="passed", head="failed",
                   verdict="new", failure=failure,
                   suspects=[Suspect(path=evil["closing fence"], symbol=evil["team mention"], score=1.0,
                                     reason=evil["link"], line=5)],
                   log_excerpt=evil["closing fence"] + "\n" + evil["details"],
                   reproduce="python -m pytest '" + evil["closing fence"] + "'") for t in tests]
    pre = Verdict(suite="probes", test=evil["team mention"], target="host", base="failed", head="failed",
                  verdict="pre_existing", failure=Failure(line=evil["hidden command"], line_no=1))
    plan = Plan(base="b" * 40, head="a" * 40, merge_base="c" * 40, changed_files=[], areas=["exir"],
                backends=["xnnpack"], suites=["probes"], targets=["host", "emulated-arm64"], recipes=[],
                notes=[evil["fake heading"], evil["tilde fence"]])
    suites = [SuiteResult(suite="probes", target=t.target, commit="a" * 40, status="crashed",
                          reason=evil["details"], tests=[t]) for t in tests]
    return Report(base="b" * 40, head="a" * 40, merge_base="c" * 40, plan=plan,
                  build=BuildResult(status="ok", kind="overlay", commit="a" * 40, reason=evil["list and quote"]),
                  results=new + [pre], suites=suites, summary={"new": 2, "pre_existing": 1})


def hostile_ci_report() -> CiReport:
    evil = HOSTILE
    failure = Failure(line=evil["closing fence"], line_no=7, category="lint", title=evil["tracking pixel"],
                      explanation=evil["issue reference"], suggestion=evil["table break"], fingerprint="beef")
    return CiReport(head="a" * 40, merge_base="c" * 40, merge_base_exact=True, jobs=[evil["team mention"]],
                    results=[Verdict(suite=evil["fake heading"], test="", target="ci", base="absent",
                                     head="failed", verdict="new", failure=failure)])


def test_a_whole_comment_from_hostile_records_renders_only_its_own_structure():
    payload = report_payload("a" * 40, hostile_report(), notes=[HOSTILE["team mention"], HOSTILE["details"]])
    sections = {"pr": payload.section, "ci": render_ci_section(hostile_ci_report())}
    body = compose_comment("a" * 40, sections, {"pr": payload.counts, "ci": {"new": 1}})
    html = render(body)
    page = Html(html)
    assert page.headings == [
        "h2 etriage: ❌ 3 new failures caused by this change · 1 pre-existing",
        "h3 Rebuild and tests", "h4 New failures caused by this change",
        "h4 Pre-existing failures (also fail at the merge base)", "h4 Tests × targets", "h3 CI logs"]
    # the failure's own title starts its numbered entry, escaped and on one line
    assert f"**1.** test_x \\#{md.JOINER}\\#{md.JOINER} etriage: ✅ No new failures caused by this change all good · " in body
    assert [c.strip() for c in page.comments] == ["etriage:summary"]  # the bot's own marker, nothing hidden by a run
    assert page.mentions() == []
    assert "img" not in page.tags and "a" not in page.tags  # no image, and no link at all here
    # <details> only the report's own: what ran, with our summary
    assert page.tags.count("details") == 1 and page.tags.count("summary") == 1
    assert [s.split(":")[0] for s in re.findall(r"<summary>(.*?)</summary>", html)] == ["What ran"]
    folded = " ".join(HOSTILE["closing fence"].split("\n"))
    assert f"python -m pytest '{folded}'" in page.code_texts  # the id's own ``` did not close the span
    assert folded in page.code_texts  # the CI log line, whole, in its span
    assert [line.split(" ")[0] for line in body.splitlines() if "**1.**" in line or "**2.**" in line
            or "**3.**" in line] == ["**1.**", "-", "-"]  # one numbering over both sections, in order


def test_hostile_records_link_only_to_the_bots_own_evidence():
    """With a public URL every entry links its evidence; names from the run never make a link."""
    links = Links("https://etriage.example", "pytorch/executorch", 7)
    payload = report_payload("a" * 40, hostile_report(), evidence=links)
    html = render(compose_comment("a" * 40, {"pr": payload.section}, {"pr": payload.counts}))
    hrefs = re.findall(r'<a href="([^"]*)"', html)
    assert hrefs and all(h.startswith("https://etriage.example/") for h in hrefs), hrefs
    assert "https://etriage.example/evidence/pytorch/executorch/7/" + "a" * 40 + "/f00d" not in hrefs  # too short
    assert Links("https://etriage.example", "pytorch/executorch)](x", 7).artefact("a" * 40, "f00dbeef") == ""


def test_the_check_run_summary_and_an_explain_reply_are_escaped_too():
    payload = report_payload("a" * 40, hostile_report(), notes=[HOSTILE["fake heading"], HOSTILE["tracking pixel"]])
    evil = HOSTILE
    entry = Entry(kind="pr", verdict="new", title=evil["fake heading"], category=evil["details"],
                  tests=[evil["closing fence"]], fingerprints=["f00dbeef"], primary_line=evil["closing fence"],
                  decided_by=evil["team mention"], decision=[evil["hidden command"], evil["tracking pixel"]],
                  looks_like=[{"category": evil["details"], "source": evil["link"], "similarity": 0.5,
                               "line": evil["tracking pixel"]}],
                  suspects=[{"path": evil["closing fence"], "line": 3, "symbol": evil["team mention"],
                             "reason": evil["markdown image"]}],
                  explanation=evil["team mention"], suggestion=evil["hidden command"], reproduce=evil["closing fence"],
                  link="javascript:alert(1)")
    for markdown in (payload.check_summary, explanation(1, entry, {"id": evil["details"], "trunk_failures": 2})):
        page = Html(render(markdown))
        assert page.headings == [] and page.comments == [] and page.mentions() == []
        assert set(page.tags) <= ALLOWED_TAGS, set(page.tags) - ALLOWED_TAGS
        assert "javascript:" not in render(markdown).replace("javascript:alert(1)</code>", "")


@pytest.mark.parametrize("source, label", [
    ("https://github.com/pytorch/executorch/issues/8762", "pytorch/executorch#8762"),
    ("https://github.com/pytorch/pytorch/pull/10584", "pytorch/pytorch#10584"),
    ("https://github.com/pytorch/executorch/commit/0123456789abcdef0123", "pytorch/executorch@0123456789"),
    ("https://github.com/pytorch/executorch/blob/v1.4.1/exir/backend/backend_api.py#L602",
     "pytorch/executorch exir/backend/backend_api.py"),
    ("https://dev.to/someone/a-post", "dev.to"),
])
def test_a_similar_failure_names_where_it_was_seen(source, label):
    assert source_label(source) == label
    html = render("- " + similar_failure({"source": source, "category": "multi_method_lowering", "similarity": 0.47,
                                          "line": "SpecViolationError: call_module is not valid"}))
    page = Html(html)
    assert re.findall(r'<a href="([^"]*)"', html) == [source]  # the one link, to the record's own address
    assert "SpecViolationError: call_module is not valid" in page.code_texts and "multi_method_lowering" in page.code_texts
    assert label in html.replace("\u2060", "") and "0.47" in html


def test_an_odd_address_of_a_similar_failure_is_no_link():
    for source in ("javascript:alert(1)", "https://github.com/x/y/issues/1)](https://evil.example", "http://plain.example/a"):
        html = render(similar_failure({"source": source, "category": "other", "similarity": 0.1, "line": "x"}))
        assert "<a " not in html and source.split(")")[0] in Html(html).code_texts[-1]
