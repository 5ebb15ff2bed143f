"""The comment's shape: one headline summing every kind of evidence, then one section each."""
from __future__ import annotations

import pytest

from tasks.summary import SUMMARY_MARKER, compose_comment, headline, nest_markdown


@pytest.mark.parametrize("counts, expected", [
    ({}, "✅ No new failures caused by this change"),
    ({"new": 0, "pre_existing": 2}, "✅ No new failures caused by this change · 2 pre-existing"),
    ({"new": 1}, "❌ 1 new failure caused by this change"),
    ({"new": 3, "environment": 1, "pre_existing": 2, "ignored": 1},
     "❌ 3 new failures caused by this change · 2 pre-existing · 1 environment · 1 ignored"),
])
def test_headline(counts, expected):
    assert headline(counts) == expected


@pytest.mark.parametrize("markdown, expected", [
    ("## etriage: 1 new failure\n\nbody", "### T\n\nbody"),
    ("## etriage: x\n## New failures\n### Probe failed", "### T\n\n#### New failures\n\n##### Probe failed"),
    ("## etriage: x\n> a note\n## New", "### T\n> a note\n\n#### New"),
    ("## etriage: x\n```\n## not a heading\n```", "### T\n```\n## not a heading\n```"),
    ("no headline\n# Top", "### T\nno headline\n\n### Top"),
])
def test_nest_markdown(markdown, expected):
    assert nest_markdown(markdown, "T") == expected


def test_comment_has_one_headline_over_both_sections():
    body = compose_comment("a" * 40, {"ci": "### CI logs\nci text", "pr": "### Rebuild and tests\npr text"},
                           {"pr": {"new": 2}, "ci": {"new": 1, "pre_existing": 2}})
    lines = body.splitlines()
    assert lines[0] == SUMMARY_MARKER
    assert lines[1] == "## etriage: ❌ 3 new failures caused by this change · 2 pre-existing"
    assert [line for line in lines if line.startswith("## ")] == [lines[1]]
    assert body.index("### Rebuild and tests") < body.index("### CI logs")
