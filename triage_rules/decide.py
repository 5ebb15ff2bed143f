"""One evidence model for a failure's category: the rule that matched and the learned opinion.

    score(category) = P_model(category) + WEIGHT[rule.strength] · [category is the rule's]
                                        + AREA_WEIGHT · [the failing test guards that category]

A specific rule (`strong`) is strong evidence: the model overrules it only when it is nearly
sure of another category and gives the rule's almost nothing. A generic rule (`weak`: a bare
exception, an assertion, "a test failed", "unclassified") is weak evidence, which a confident
model overrules. etriage's own probes (`certain`) are never overruled. A test whose name says
what it guards (`test_to_backend_multi_method*`, `*mutable_buffer*`, `*kv_cache*`) is evidence
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

WEIGHT = {"strong": 0.4, "weak": 0.0}
RULE_PRIOR = {"strong": 0.8, "weak": 0.3}  # how often such a rule alone is right
MODEL_FLOOR = 0.3  # the model overrules a weak rule only when at least this sure
ENVIRONMENT_FLOOR = 0.6  # a model-decided infrastructure category blames the environment above this
AREA_WEIGHT = 0.5
CATEGORIES_FILE = Path(__file__).with_name("categories.yaml")
# What a failing test guards, read from its id (pytest node id, unittest id, probe name).
GUARDS = {
    "multi_method_lowering": re.compile(r"(?i)multi_?method|multi_graphs?|two_methods|to_backend_multi"),
    "mutable_buffer": re.compile(r"(?i)mutable_?buffer|kv_?cache|buffer_mutation|stateful|index_(put|copy)"),
}


@functools.lru_cache(maxsize=1)
def category_texts() -> dict[str, dict]:
    data = yaml.safe_load(CATEGORIES_FILE.read_text(encoding="utf-8"))["categories"]
    missing = set(CATEGORIES) - set(data)
    if missing:
        raise ValueError(f"{CATEGORIES_FILE}: no entry for {', '.join(sorted(missing))}")
    return data


def decide(failure: Failure, opinion: Opinion | None) -> None:
    """Set the failure's category, decided_by and confidence from its rule and the model's
    opinion; when the model overrules the rule, the title, explanation, suggestion, owners and
    environment follow the model's category."""
    rule = rules_by_id().get(failure.rule)
    strength = rule.strength if rule is not None else "weak"
    if opinion is None or strength == "certain" or not failure.line.strip():
        failure.decided_by = failure.rule
        failure.confidence = 1.0 if strength == "certain" else RULE_PRIOR[strength]
        return
    failure.looks_like = [
        {"source": n.source, "category": n.category, "line": n.line, "similarity": n.similarity}
        for n in opinion.nearest
    ]
    probabilities = opinion.probabilities
    # an environment verdict (SDK missing, backend not registered) is never re-read as the area's
    guarded = None if failure.environment else guarded_area(failure.test or "")
    scores = {c: p + (WEIGHT[strength] if c == failure.category else 0.0) + (AREA_WEIGHT if c == guarded else 0.0)
              for c, p in probabilities.items()}
    if rule is not None and rule.crash:  # a crash is what the change can cause: never excused
        scores = {c: s for c, s in scores.items() if not category_texts()[c].get("environment")}
    chosen = max(scores, key=lambda c: (scores[c], c == failure.category))
    p_model = probabilities.get(chosen, 0.0)
    if guarded and chosen == guarded and chosen != failure.category:
        failure.decided_by = "test-area"
        failure.confidence = round(1 - (1 - RULE_PRIOR["strong"]) * (1 - p_model), 3)
        _relabel(failure, chosen)
        return
    unsure = chosen != failure.category and p_model < MODEL_FLOOR
    if unsure and failure.rule not in ("unclassified", "fallback-line"):
        chosen, p_model = failure.category, probabilities.get(failure.category, 0.0)
    if chosen == failure.category and (strength == "strong" or unsure):
        failure.decided_by = failure.rule
        failure.confidence = round(1 - (1 - RULE_PRIOR[strength]) * (1 - p_model), 3)
        return
    failure.decided_by = "model"
    failure.confidence = round(p_model, 3)
    if chosen == failure.category:
        return  # a generic rule and the model agree: keep the rule's own texts
    _relabel(failure, chosen)


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
    if generic and failure.rule not in ("unclassified", "fallback-line"):
        failure.explanation += f" ({generic})"
    failure.suggestion = texts.get("suggestion", "")
    failure.environment = bool(texts.get("environment")) and failure.confidence >= ENVIRONMENT_FLOOR
    failure.owners = owners_of(texts.get("owners", []), failure.frames)
