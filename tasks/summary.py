"""What the bot writes on a pull request: the summary comment, the check-run output, labels.

The comment has one section per kind of evidence (`pr`: the bot's own rebuild-and-test run;
`ci`: the PR's failed CI jobs, classified from their logs), each rendered when its run finishes
and stored with the run, so whichever task publishes last composes the whole comment.
"""
from __future__ import annotations

import re

from dataclasses import dataclass, field

from bot import md
from bot.evidence import NUMBER, SECTION_ORDER, Entry, number
from bot.github_client import SUMMARY_MARKER
from tasks.pipeline.compare import by_root, spread
from tasks.pipeline.report import entry_of
from tasks.records import CiReport
from triage_rules.linekinds import raised
from triage_rules.records import dump, load

VERDICT_ICONS = {"new": "❌", "pre_existing": "⚪", "flaky": "🔁", "environment": "🛠️",
                 "fixed": "✅", "ignored": "🙈", "not_in_log": "❔"}


@dataclass
class PublishPayload:
    """Everything one publish writes; kept in pending_reports until GitHub took all of it."""

    kind: str  # pr | ci
    head_sha: str
    section: str  # this run's markdown section of the comment
    blame_categories: list[str] = field(default_factory=list)  # categories of new failures
    counts: dict[str, int] = field(default_factory=dict)  # verdict -> failures, for the headline
    check_conclusion: str | None = None  # None: this kind does not own the check run
    check_title: str = ""
    check_summary: str = ""
    check_text: str = ""
    annotations: list[dict] = field(default_factory=list)  # Annotation fields
    # The whole Report (pr) or CiReport (ci), dumped: rendered again after `/etriage ignore`.
    report: dict | None = None
    notes: list[str] = field(default_factory=list)  # pr: the run's notes, for the same
    # The section's numbered failures, in its order (bot.evidence.Entry, dumped): stored with
    # the run, so `/etriage explain 3` finds what the comment numbers 3.
    index: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return dump(self)

    @classmethod
    def from_dict(cls, data: dict) -> "PublishPayload":
        return load(cls, data)


_JOB_URL = re.compile(r"https://[A-Za-z0-9./_#?=%&+:-]{1,300}")  # a job's page (at a log line), plain characters only
HEADLINE_ORDER = ("pre_existing", "flaky", "environment", "not_in_log", "ignored", "fixed")
SECTION_TITLES = {"pr": "Rebuild and tests", "ci": "CI logs"}


def headline(counts: dict[str, int]) -> str:
    """The comment's one headline: new failures first, then whatever else was found."""
    new = counts.get("new", 0)
    if counts.get("refused"):  # a hostile tree: nothing ran, and nothing is anyone's "no new failures"
        return "⛔ The change was refused: its tree holds a path that cannot be a file name; nothing of it was run"
    first = (f"❌ {new} new failure{'s' if new != 1 else ''} caused by this change" if new
             else "✅ No new failures caused by this change")
    rest = [f"{n} {verdict.replace('_', '-')}" for verdict in HEADLINE_ORDER
            if (n := counts.get(verdict, 0))]
    return " · ".join([first] + rest)


def compose_comment(head_sha: str, sections: dict[str, str],
                    counts: dict[str, dict[str, int]] | None = None) -> str:
    """The whole comment: one headline summing the verdicts of every kind of evidence, then
    one `###` section per kind (`pr` first, then `ci`)."""
    ordered = [k for k in SECTION_ORDER if sections.get(k)] + sorted(
        k for k in sections if k not in SECTION_ORDER and sections[k])
    total: dict[str, int] = {}
    for kind in ordered:
        for verdict, n in ((counts or {}).get(kind) or {}).items():
            total[verdict] = total.get(verdict, 0) + n
    if ordered:
        parts = [SUMMARY_MARKER, f"## etriage: {headline(total)}", "",
                 f"<sub>at {md.code(head_sha[:12])}</sub>", ""]
    else:
        parts = [SUMMARY_MARKER, f"## etriage: triage of {md.code(head_sha[:12])} is running", "",
                 "This comment is updated when it finishes.", ""]
    for section in number([sections[kind] for kind in ordered]):  # one numbering over the whole comment
        parts += [section.rstrip(), ""]
    parts.append('<sub>Commands: `/etriage explain N` (the evidence), `/etriage ignore N --reason "..."`, '
                 "`/etriage rerun` (the failed CI jobs and etriage's suites), `/etriage help`.</sub>")
    return "\n".join(parts).rstrip() + "\n"


def ci_counts(report: CiReport) -> dict[str, int]:
    """verdict -> root causes, in the order they first appear (how the section says them)."""
    roots: dict[str, set] = {}
    for verdict in report.results:
        roots.setdefault(verdict.verdict, set()).add(verdict.root or id(verdict))
    return {verdict: len(found) for verdict, found in roots.items()}


def render_ci_section(report: CiReport) -> str:
    return ci_section(report)[0]


def ci_section(report: CiReport) -> tuple[str, list[Entry]]:
    """The `ci` section of the comment, one numbered entry per root cause linked to the job's
    log at its line (`Verdict.link`), and the entries (bot.evidence)."""
    lines = [f"### {SECTION_TITLES['ci']}"]
    merge_base = report.merge_base
    base_note = (f"compared with the merge base {md.code(merge_base[:12])}" if merge_base and report.merge_base_exact
                 else f"compared with the base branch at {md.code(merge_base[:12])} (no local clone to find the "
                      "merge base)" if merge_base
                 else "no merge base known: nothing could be marked pre-existing")
    if not report.results:
        jobs = ", ".join(md.code(job, 120) for job in report.jobs) or "none"
        lines.append(f"Failed CI jobs at {md.code(report.head[:12])}: no failure line found in their logs "
                     f"({jobs}); {base_note}.")
        return "\n".join(lines), []
    counts = ci_counts(report)
    lines.append(f"Failed CI jobs at {md.code(report.head[:12])}, classified from their logs: "
                 + ", ".join(f"{n} {verdict.replace('_', '-')}" for verdict, n in counts.items()) + f" ({base_note}).")
    lines.append("")
    entries = []
    for group in by_root(report.results):  # one root cause, one entry
        verdict, failure = group[0], group[0].failure
        entries.append(entry_of(group, "ci", link=verdict.link if _JOB_URL.fullmatch(verdict.link or "") else "",
                                artefact=verdict.log_excerpt[:20000]))
        icon = VERDICT_ICONS.get(verdict.verdict, "•")
        what = md.code(verdict.test) if verdict.test else md.text(failure.title or failure.category, 120)
        anchor = re.search(r"#step:(\d+):(\d+)$", entries[-1].link)
        said = f"job log, step {anchor[1]} line {anchor[2]}" if anchor else f"log line {int(failure.line_no)}"
        where = f" · [{said}]({entries[-1].link})" if entries[-1].link else f" · {said}"
        lines.append(f"- **{NUMBER}.** {icon} **{md.text(verdict.verdict.replace('_', '-'), 40)}** · "
                     f"{verdict.category_words} · job {md.code(verdict.suite, 120)} · {what}{where}")
        lines.append(f"  {md.code(failure.line.strip(), 240)}")
        if said := raised(failure):  # the line is the test's section header: what it raised, beside it
            lines.append(f"  raised {md.code(said, 240)}")
        if verdict.verdict == "environment":
            lines.append("  The environment (runner, SDK, device or infrastructure) failed, "
                         "not this change.")
        if verdict.verdict == "not_in_log":
            lines.append("  The real error is not in this job's log (only its wrapper's exit line)"
                         + (f": [open the job]({verdict.link})." if _JOB_URL.fullmatch(verdict.link or "") else "."))
        if verdict.verdict == "ignored":
            lines.append(f"  Ignored by a maintainer (not counted): *{md.text(verdict.ignored_reason, 500)}*")
        if len(group) > 1:
            lines.append(f"  1 failure, {md.text(spread(group, ci=True), 200)}; also " + ", ".join(
                md.code(v.suite, 120) + (f" {md.code(v.test)}" if v.test else "") for v in group[1:4])
                + (f" and {len(group) - 4} more" if len(group) > 4 else ""))
    return "\n".join(lines), entries


def labels_to_change(current: list[str], blame_categories: set[str],
                     category_labels) -> tuple[list[str], list[str]]:
    """(labels to add, labels to remove): the repo config's category labels follow the failures
    on the PR (added while a new failure of the category is there, removed when it is gone)."""
    wanted = {category_labels[c] for c in blame_categories if c in category_labels}
    ours = {label for label in current if label in set(category_labels.values())}
    return sorted(wanted - set(current)), sorted(ours - wanted)
