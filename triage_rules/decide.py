"""One evidence model for a failure's category: the rule that matched and the learned opinion.

    score(category) = P_model(category) + WEIGHT[rule.strength] · [category is the rule's]
                                        + AREA_WEIGHT · [the failing test guards that category]

A specific rule (`strong`) is strong evidence: the model overrules it only when it is nearly
sure of another category and gives the rule's almost nothing. Structural signals weigh against it
unless the rule read them: in its own line, or as the stack around the frame it matched
(`to_backend` and the partitioner under a QNN op builder's frame). A generic rule (`weak`: a bare
exception, an assertion, "a test failed", "unclassified") is weak evidence, which a confident
model overrules. etriage's own probes (`certain`) are never overruled. A test whose name says
what it guards (`test_to_backend_multi_method*`, `*mutable_buffer*`, `*kv_cache*`, QNN's `TestQNN*Operator`) is evidence
for that category even when its exception is generic or another layer's (a SpecViolationError
raised inside a multi-method test is a multi-method failure); the exception is still shown, and
an environment verdict is never re-read this way. The weights were chosen by cross-validation
on the corpus's training part (`etriage eval --cv`), never on its evaluation part.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

import yaml

from triage_rules.scorer import Opinion
from triage_rules.records import CATEGORIES, Failure
from triage_rules.rules import owners_of, rules_by_id
from triage_rules.structure import found_in, only_on_the_stack
from triage_rules.structure import signals as signal_table

WEIGHT = {"strong": 0.4, "weak": 0.0}
RULE_PRIOR = {"strong": 0.8, "weak": 0.3}  # how often such a rule alone is right
MODEL_FLOOR = 0.0  # the model overrules a weak rule whenever it leans elsewhere (grouped CV: 0.0 > 0.15 > 0.3)
# ... except towards `other`, which names no cause: a model that only finds the text unfamiliar
# does not overrule a rule's reading of it below this (a timeout stays a timeout). Grouped CV on
# the training part is flat from 0.0 to 0.4 (80.5%) and loses from 0.5 (80.1%).
OTHER_FLOOR = 0.4
ENVIRONMENT_FLOOR = 0.6  # a model-decided infrastructure category blames the environment above this
AREA_WEIGHT = 0.5
STRUCTURE_WEIGHT = 0.4  # a structural signal's category (structure.yaml `points_to`)
# Below this (calibrated) confidence, or with the runner-up's score this close, the verdict
# names both categories and labels nothing (a label also needs records.LABEL_CONFIDENCE).
UNSURE_CONFIDENCE = 0.8
# A quiet log (a failed job's log without one word of trouble, engine.fallback_failure) names a
# category only when the model recognises its text at least this well (a wrong answer, numbers
# that differ); below, the real error is not in the log. Clean logs score 0.08-0.12 in grouped
# cross-validation on the training part, recognised failures 0.15-0.67.
QUIET_FLOOR = 0.2
UNSURE_MARGIN = 0.1
CATEGORIES_FILE = Path(__file__).with_name("categories.yaml")
CALIBRATION_FILE = Path(__file__).with_name("calibration.yaml")
# What a failing test guards, read from its id (pytest node id, unittest id, probe name).
GUARDS = {
    "multi_method_lowering": re.compile(r"(?i)multi_?method|multi_graphs?|two_methods|to_backend_multi"),
    "mutable_buffer": re.compile(r"(?i)mutable_?buffer|kv_?cache|buffer_mutation|stateful|index_(put|copy)"),
    # QNN's per-operator test classes (test_qnn_delegate.py) and etriage's own QNN op probes
    "qnn_op_validation": re.compile(r"TestQNN\w*Operator\b|(?<![\w.])qnn_ops(?:::|$)"),
}


@functools.lru_cache(maxsize=1)
def category_texts() -> dict[str, dict]:
    data = yaml.safe_load(CATEGORIES_FILE.read_text(encoding="utf-8"))["categories"]
    missing = set(CATEGORIES) - set(data)
    if missing:
        raise ValueError(f"{CATEGORIES_FILE}: no entry for {', '.join(sorted(missing))}")
    return data


@functools.lru_cache(maxsize=1)
def calibration() -> tuple[tuple[float, float], ...]:
    """(raw confidence upper bound, how often right) knots, fitted by `etriage eval --cv 5
    --calibrate` on the training part; empty (no calibration) when the file is absent."""
    if not CALIBRATION_FILE.exists():
        return ()
    data = yaml.safe_load(CALIBRATION_FILE.read_text(encoding="utf-8")) or {}
    return tuple((float(upper), float(right)) for upper, right in data.get("knots", []))


def calibrated(raw: float, knots: tuple[tuple[float, float], ...] | None = None) -> float:
    """A stated confidence that is right about as often as it says: the fitted step function."""
    knots = calibration() if knots is None else knots
    for upper, right in knots:
        if raw <= upper:
            return right
    return knots[-1][1] if knots else raw


def decide(failure: Failure, opinion: Opinion | None, calibrate: bool = True) -> None:
    """Set the failure's category, decided_by, confidence and decision (the evidence, strongest
    first) from its rule, its structure, its test's area and the model's opinion; when another
    category wins over the rule's, the title, explanation, suggestion, owners and environment
    follow it. When the top two are close or the confidence low, `unsure` names both."""
    rule = rules_by_id().get(failure.rule)
    strength = rule.strength if rule is not None else "weak"
    signals = found_in(failure)
    # a failure whose own line is a crash is runtime_error, whatever test it crashed in and
    # whatever its stack names (issue 21): the crash is what the change is asked to answer for
    crashed = rule is not None and rule.crash and any(key == "primary" for key, _ in rule.matchers)
    # an environment verdict (SDK missing, backend not registered) is never re-read as the area's
    # or the structure's category; a signal's weight is learnt from the corpus (Scorer.pointing)
    pointed = {} if failure.environment or crashed or opinion is None else opinion.structure
    # the words a specific rule read in its own line are its evidence, not another category's
    # ("no free space in the KV cache" names the cache: kv-cache-capacity read it)
    read = {c: v for c, v in pointed.items()
            if strength == "strong" and c != failure.category and _read_by_rule(v[1], failure.line)}
    # nor is the stack around the frame a specific rule read: a QNN op builder raising under
    # to_backend and the partitioner (on every lowering's stack) failed in the builder
    stack = only_on_the_stack(failure) if pointed and strength == "strong" and _read_frame(rule) else set()
    around = {c: v for c, v in pointed.items() if stack and c != failure.category and c not in read
              and {entry.split(" ", 1)[0] for entry in v[1]} <= stack}
    pointed = {c: v for c, v in pointed.items() if c not in read and c not in around}
    # nor is a failure a specific rule reads as the test's setup failing (categories.yaml `setup`:
    # an import, the build, the toolchain, the CI or the device): the test never reached what it guards
    setup = strength == "strong" and bool(category_texts()[failure.category].get("setup"))
    area = guarded_area(failure.test or "")
    guarded = None if failure.environment or setup or crashed else area
    evidence = [f"rule `{failure.rule}` ({strength}, weight {WEIGHT.get(strength, 1.0):.1f}) says {failure.category}"]
    if pointed:
        evidence += [f"structure points to {c} (weight {STRUCTURE_WEIGHT * w:.2f}): learned from "
                     + ", ".join(said) for c, (w, said) in sorted(pointed.items(), key=lambda kv: -kv[1][0])]
    elif signals and not read and not around:
        evidence.append("structure: " + ", ".join(signals) + " (no learned direction)")
    evidence += [f"structure's {', '.join(e.split(' ', 1)[0] for e in said)} (towards {c}) is in the rule's own "
                 "line: the rule's evidence, not counted against it" for c, (_, said) in read.items()]
    evidence += [f"structure's {', '.join(e.split(' ', 1)[0] for e in said)} (towards {c}) is only the stack "
                 "around the frame the rule read: not counted against it" for c, (_, said) in around.items()]
    if guarded:
        evidence.append(f"the failing test guards {guarded} (weight {AREA_WEIGHT:.1f})")
    elif crashed and area:
        evidence.append(f"the failing test guards {area}, but its own line is a crash: runtime_error, not the test's area")
    failure.unsure = []
    if failure.rule == "quiet-log" and (opinion is None or opinion.ranked[0][1] < QUIET_FLOOR):
        _not_in_log(failure)
    if opinion is None or strength == "certain" or not failure.line.strip() or failure.error_not_in_log:
        failure.decided_by = failure.rule
        failure.confidence = 1.0 if strength == "certain" else RULE_PRIOR[strength]
        failure.decision = evidence[:1] + (["a probe's own category is never overruled"] if strength == "certain" else [])
        if failure.error_not_in_log:  # nothing to weigh: the log does not hold the error
            failure.decision.append("the log holds no error line: the real error is not in it")
        return
    failure.looks_like = [
        {"source": n.source, "category": n.category, "line": n.line, "similarity": n.similarity}
        for n in opinion.nearest
    ]
    probabilities = opinion.probabilities
    scores = {c: p + (WEIGHT[strength] if c == failure.category else 0.0) + (AREA_WEIGHT if c == guarded else 0.0)
              + STRUCTURE_WEIGHT * pointed.get(c, (0.0,))[0]
              for c, p in probabilities.items()}
    if rule is not None and rule.crash:  # a crash is what the change can cause: never excused
        scores = {c: s for c, s in scores.items() if not category_texts()[c].get("environment")}
    ranked = sorted(scores, key=lambda c: (-scores[c], c != failure.category))
    # a crash stays runtime_error: the model, reading the test's name in the crash line, may only
    # make the verdict unsure ("runtime_error or multi_method_lowering, unsure": no label)
    chosen = failure.category if crashed else ranked[0]
    top = opinion.ranked[:2]
    evidence.append("model: " + ", ".join(f"{c} {p:.2f}" for c, p in top)
                    + (f" (from {', '.join(opinion.reasons)})" if opinion.reasons else ""))
    p_model = probabilities.get(chosen, 0.0)
    outside = (chosen == guarded or chosen in pointed) and chosen != failure.category
    if outside:
        failure.decided_by = "test-area" if chosen == guarded else "structure"
        failure.confidence = round(1 - (1 - RULE_PRIOR["strong"]) * (1 - p_model), 3)
        _relabel(failure, chosen)
    else:
        floor = OTHER_FLOOR if chosen == "other" else MODEL_FLOOR
        unsure = chosen != failure.category and p_model < floor
        if unsure and failure.rule not in ("unclassified", "fallback-line", "quiet-log"):
            chosen, p_model = failure.category, probabilities.get(failure.category, 0.0)
        if chosen == failure.category and (strength == "strong" or unsure):
            failure.decided_by = failure.rule
            failure.confidence = round(1 - (1 - RULE_PRIOR[strength]) * (1 - p_model), 3)
        else:
            failure.decided_by = "model"
            failure.confidence = round(p_model, 3)
            if chosen != failure.category:
                _relabel(failure, chosen)
    if calibrate:
        failure.confidence = round(calibrated(failure.confidence), 3)
    runner_up = next(c for c in ranked if c != failure.category)
    margin = scores.get(failure.category, 0.0) - scores[runner_up]
    if failure.confidence < UNSURE_CONFIDENCE or margin < UNSURE_MARGIN:
        failure.unsure = [failure.category, runner_up]
    failure.decision = [f"{failure.decided_by} decided {failure.category}"
                        + (f" (unsure: {runner_up} is close)" if failure.unsure else ""), *evidence]


def _read_frame(rule) -> bool:
    """Whether the rule matched a traceback frame (the innermost code that raised, named)."""
    return rule is not None and any(key == "frame" for key, _ in rule.matchers)


def _read_by_rule(said: tuple[str, ...], line: str) -> bool:
    """Whether every signal in `said` ("<id> <weight> (...)") is found in the rule's own line."""
    by_id = {s.id: s for s in signal_table()}
    ids = [entry.split(" ", 1)[0] for entry in said]
    return all(i in by_id and by_id[i].pattern.search(line) for i in ids)


def _not_in_log(failure: Failure) -> None:
    failure.error_not_in_log = True
    failure.category = "other"
    failure.title = "Failed job whose log holds no error line: the real error is not in it"
    failure.explanation = ("The job failed, but no line of its log reads as an error and none is a known "
                           f"failure's text; the line shown is: {failure.line.strip()}")
    failure.suggestion = "Open the job on the CI page: the failing step's status or an artefact holds the error."


def guarded_area(test: str) -> str | None:
    """The category a test guards, by its name; None for a test whose name says nothing."""
    return next((category for category, pattern in GUARDS.items() if pattern.search(test)), None)


def _relabel(failure: Failure, category: str) -> None:
    texts = category_texts()[category]
    line = failure.line.strip()
    generic = failure.title
    failure.category = category
    failure.title = texts["title"]
    failure.explanation = texts["explanation"].replace("{line}", line)
    if generic and failure.rule not in ("unclassified", "fallback-line", "quiet-log"):
        failure.explanation += f" ({generic})"
    failure.suggestion = texts.get("suggestion", "")
    failure.environment = bool(texts.get("environment")) and failure.confidence >= ENVIRONMENT_FLOOR
    failure.owners = owners_of(texts.get("owners", []), failure.frames)
