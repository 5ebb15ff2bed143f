"""The comment's shape: one headline summing every kind of evidence, then one section each."""
from __future__ import annotations

import pytest

from tasks.pipeline.report import to_markdown
from tasks.records import BuildResult, Plan, Report, Verdict
from tasks.summary import SUMMARY_MARKER, compose_comment, headline
from triage_rules import Failure


@pytest.mark.parametrize("counts, expected", [
    ({}, "✅ No new failures caused by this change"),
    ({"new": 0, "pre_existing": 2}, "✅ No new failures caused by this change · 2 pre-existing"),
    ({"new": 1}, "❌ 1 new failure caused by this change"),
    ({"new": 3, "environment": 1, "pre_existing": 2, "ignored": 1},
     "❌ 3 new failures caused by this change · 2 pre-existing · 1 environment · 1 ignored"),
    # a hostile tree (tasks/pipeline/run.py _refused): nothing ran, so no "no new failures"
    ({"environment": 1, "refused": 1},
     "⛔ The change was refused: its tree holds a path that cannot be a file name; nothing of it was run"),
])
def test_headline(counts, expected):
    assert headline(counts) == expected


def _report() -> Report:
    plan = Plan(base="b" * 40, head="h" * 40, merge_base="m" * 40, changed_files=[], areas=["exir"],
                backends=[], suites=["probes"], targets=["host"], recipes=[], notes=["a note"])
    failure = Verdict(suite="probes", test="multi_method::p", target="host", base="passed", head="failed",
                      verdict="new", failure=Failure(line="ProbeFailure: [multi_method_lowering] x", line_no=3,
                                                     category="multi_method_lowering", title="Probe failed"),
                      reproduce="python -m tasks.probes", log_excerpt="## not a heading")
    return Report(base="b" * 40, head="h" * 40, merge_base="m" * 40, plan=plan,
                  build=BuildResult(status="ok", kind="overlay", commit="h" * 40),
                  results=[failure], suites=[], summary={"new": 1})


def test_report_as_a_section_of_the_comment():
    standalone = to_markdown(_report()).splitlines()
    section = to_markdown(_report(), section_title="T").splitlines()
    assert standalone[0].startswith("## etriage: ") and section[0] == "### T"
    assert "## New failures caused by this change" in standalone
    assert "#### New failures caused by this change" in section and "##### Probe failed: 1 failure, in 1 probe" in section
    assert [line for line in section if line.startswith("## ")] == ["## not a heading"]  # only fenced text
    assert section[section.index("> a note") + 1] == ""  # a heading after a quote is not part of it
    assert section[section.index("## not a heading") - 1] == "```"  # fenced log text is left alone


def test_comment_has_one_headline_over_both_sections():
    body = compose_comment("a" * 40, {"ci": "### CI logs\nci text", "pr": "### Rebuild and tests\npr text"},
                           {"pr": {"new": 2}, "ci": {"new": 1, "pre_existing": 2}})
    lines = body.splitlines()
    assert lines[0] == SUMMARY_MARKER
    assert lines[1] == "## etriage: ❌ 3 new failures caused by this change · 2 pre-existing"
    assert [line for line in lines if line.startswith("## ")] == [lines[1]]
    assert body.index("### Rebuild and tests") < body.index("### CI logs")


def test_a_new_failure_says_who_decided_and_what_it_looks_like():
    report = _report()
    report.results[0].failure.decided_by, report.results[0].failure.confidence = "model", 0.734
    report.results[0].failure.looks_like = [{"source": "https://github.com/pytorch/executorch/issues/1", "category":
                                     "multi_method_lowering", "line": "x", "similarity": 0.61}]
    text = to_markdown(report)
    assert "- **Category:** `multi_method_lowering` (decided by `model`, confidence 0.73)" in text
    # the neighbour's own line, its category and similarity, where it was seen (owner/repo#N, linked)
    assert ("- **Looks like** (the nearest labelled failures):\n  - `x` (`multi_method_lowering`, 0.61), "
            "[pytorch/executorch\\#\u2060" "1](https://github.com/pytorch/executorch/issues/1)\n") in text
    plain = to_markdown(_report())
    assert "Looks like" not in plain and "decided by" not in plain
