"""The extractor's primary line against the line PyTorch's CI maintainers marked in 41 real logs."""
from __future__ import annotations

from triage_rules import classify_text

# The floor is what the engine reaches today; a change that loses a log must say why.
MATCH_FLOOR = 40


def _primary(text: str) -> tuple[str, int] | None:
    failures = classify_text(text)
    return (failures[0].line.strip(), failures[0].line_no) if failures else None


def test_all_marked_logs_are_present(marked_logs):
    assert len(marked_logs) == 41


def test_primary_line_match_rate(match_report, marked_logs):
    misses = []
    for log in marked_logs:
        got = _primary(log.text)
        if got is None or got[0] != log.line.strip():
            misses.append(f"  miss {log.name}: want line {log.line_no} {log.line.strip()[:90]!r}, got {got and got[1]} {got and got[0][:90]!r}")
    hits = len(marked_logs) - len(misses)
    match_report.append(f"match rate: {hits}/{len(marked_logs)}")
    match_report.extend(misses)
    print(f"match rate: {hits}/{len(marked_logs)}", *misses, sep="\n")
    assert hits >= MATCH_FLOOR, "\n".join(misses)


def test_primary_line_number_points_at_that_line_of_the_input(marked_logs):
    from triage_rules.readers import clean_line

    for log in marked_logs:
        first = classify_text(log.text)[0]
        original = log.text.split("\n")[first.line_no - 1]
        assert clean_line(original) == first.line, log.name


def test_every_failure_is_fully_filled(marked_logs):
    from triage_rules.records import CATEGORIES

    for log in marked_logs:
        for failure in classify_text(log.text):
            assert failure.category in CATEGORIES
            assert failure.title and failure.explanation and failure.rule, log.name
            assert len(failure.fingerprint) == 16
            assert failure.line_no >= 1
