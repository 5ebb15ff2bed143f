"""An honest "unsure" (issue 21, item 4): close or low-confidence decisions name both categories
and label nothing; stated confidences are calibrated on the grouped cross-validation."""
from __future__ import annotations

import pytest

from tasks.pipeline import compare
from tasks.records import CiReport
from tasks.service import ci_payload
from triage_rules.corpus import Record
from triage_rules.decide import calibrated, calibration, decide
from triage_rules.engine import classify_text
from triage_rules.evaluate import MIN_STEP, Outcome, fit_calibration
from triage_rules.records import CATEGORIES, LABEL_CONFIDENCE
from triage_rules.scorer import Opinion

JOB = {"name": "pull / unittest / linux", "id": 7, "html_url": "https://example.invalid/job/7"}


def opinion(**probabilities: float) -> Opinion:
    rest = (1 - sum(probabilities.values())) / (len(CATEGORIES) - len(probabilities))
    return Opinion({c: probabilities.get(c, rest) for c in CATEGORIES}, ())


def judged(line: str, **probabilities: float):
    [failure] = classify_text(line + "\n", use_model=False)
    decide(failure, opinion(**probabilities))
    return failure


@pytest.mark.parametrize("probabilities, unsure", [
    ({"mutable_buffer": 0.45, "export_failure": 0.40}, ["mutable_buffer", "export_failure"]),  # close
    ({"mutable_buffer": 0.35}, ["mutable_buffer", "other"]),  # low: the weak rule's category is the runner-up
    ({"mutable_buffer": 0.97}, []),  # sure
])
def test_close_or_low_decisions_name_both_categories(probabilities, unsure):
    failure = judged("ValueError: bad cache index", **probabilities)
    assert failure.unsure == unsure
    assert ("unsure" in failure.decision[0]) == bool(unsure)


def test_an_unsure_new_failure_says_so_and_labels_nothing():
    unsure = judged("ValueError: bad cache index", mutable_buffer=0.45, export_failure=0.40)
    sure = judged("ValueError: bad cache index", mutable_buffer=0.97)
    assert sure.confidence >= LABEL_CONFIDENCE
    for failure, label in ((unsure, []), (sure, ["mutable_buffer"])):
        [verdict] = compare.decide_ci([(JOB, failure)], set())
        payload = ci_payload(CiReport(head="a" * 40, merge_base="b" * 40, merge_base_exact=True,
                                      jobs=[JOB["name"]], results=[verdict]))
        assert payload.blame_categories == label
        assert ("`mutable_buffer` or `export_failure`, unsure" in payload.section) == (not label)


def test_the_shipped_calibration_is_a_non_decreasing_step_function():
    knots = calibration()
    assert knots, "triage_rules/calibration.yaml is fitted by etriage eval --cv 5 --calibrate"
    uppers, rights = zip(*knots)
    assert list(uppers) == sorted(uppers) and list(rights) == sorted(rights)
    assert calibrated(0.0) == rights[0] and calibrated(1.0) == rights[-1]


def test_pool_adjacent_violators_fits_how_often_each_confidence_was_right():
    record = Record(id="x", source="s", excerpt="e", failure_line="e", category="other", origin="o", note="")
    def outcome(confidence, right):
        return Outcome(record, "other" if right else "lint", "other", "model", confidence, False, False)
    # low confidences right a third of the time, high ones always: two steps, never decreasing
    outcomes = [outcome(0.1 + i / 1000, i % 3 == 0) for i in range(60)] + [outcome(0.9, True)] * 40
    knots = fit_calibration(outcomes)
    assert [right for _, right in knots] == sorted(right for _, right in knots)
    assert knots[0][1] == pytest.approx(20 / 60, abs=0.02) and knots[-1] == (0.9, 1.0)
    assert all(upper > 0 for upper, _ in knots) and len(knots) <= 100 // MIN_STEP
