"""`etriage eval CORPUS.jsonl`: how well the engine names the category of real failures.

The model used is trained on the training part (`--train`, default the shipped train.jsonl)
less any thread that also appears in the evaluated file, so a figure is never measured on what
the model learnt from. `--cv K` instead runs K-fold cross-validation grouped by source thread
on the training part: the figure used to choose the model's parameters.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from triage_rules.corpus import TRAIN_FILE, CorpusError, Record, generated_files, load_corpus
from triage_rules.decide import CALIBRATION_FILE, calibration
from triage_rules.engine import add_opinions, classify_text, failure_of_excerpt
from triage_rules.model import train
from triage_rules.scorer import Scorer
from triage_rules.records import CATEGORIES, LABEL_CONFIDENCE

MIN_STEP = 20  # records per calibration step at least: fewer say nothing reliable
FOCUS = ("multi_method_lowering", "mutable_buffer", "qnn_sdk_or_toolchain", "qnn_op_validation", "device_infra")


@dataclass
class Outcome:
    record: Record
    predicted: str
    rules_only: str
    decided_by: str
    confidence: float
    line_found: bool  # the primary line is the labelled failure line
    no_failure: bool  # without --failed the engine found nothing
    unsure: bool = False  # the engine said "X or Y, unsure" (no label would be applied)
    pair: tuple[str, ...] = ()  # the two categories it named then

    @property
    def right(self) -> bool:
        return self.predicted == self.record.category


@dataclass
class Report:
    outcomes: list[Outcome] = field(default_factory=list)

    def summary(self) -> dict:
        total = len(self.outcomes)
        per: dict[str, dict] = {}
        confusion: dict[str, Counter] = defaultdict(Counter)
        for o in self.outcomes:
            confusion[o.record.category][o.predicted] += 1
        for category in CATEGORIES:
            support = sum(confusion[category].values())
            predicted = sum(confusion[c][category] for c in confusion)
            hits = confusion[category][category]
            per[category] = {
                "support": support,
                "accuracy": _ratio(hits, support),
                "precision": _ratio(hits, predicted),
                "recall": _ratio(hits, support),
                "rules_only_accuracy": _ratio(sum(o.rules_only == category for o in self.outcomes
                                                  if o.record.category == category), support),
            }
        pairs = Counter({(t, p): n for t, row in confusion.items() for p, n in row.items() if t != p})
        return {
            "records": total,
            "accuracy": _ratio(sum(o.predicted == o.record.category for o in self.outcomes), total),
            "rules_only_accuracy": _ratio(sum(o.rules_only == o.record.category for o in self.outcomes), total),
            "focus_accuracy": {c: per[c]["accuracy"] for c in FOCUS},
            "decided_by_rule": _ratio(sum(o.decided_by != "model" for o in self.outcomes), total),
            "decided_by_model": _ratio(sum(o.decided_by == "model" for o in self.outcomes), total),
            "no_failure_without_failed": _ratio(sum(o.no_failure for o in self.outcomes), total),
            "primary_line_is_labelled_line": _ratio(sum(o.line_found for o in self.outcomes), total),
            "per_category": per,
            "confusion": {t: dict(row) for t, row in sorted(confusion.items())},
            "worst_pairs": [{"true": t, "predicted": p, "count": n} for (t, p), n in pairs.most_common(8)],
            **sureness(self.outcomes),
        }


RELIABILITY_BINS = (0.0, 0.5, 0.7, 0.8, 0.9, 1.01)


def sureness(outcomes: list[Outcome]) -> dict:
    """What a stated confidence is worth (the reliability table: per confidence band, how often
    the category is right), how often the engine is unsure, and how precise the categories it
    states as sure are: those become labels, so their precision matters more than coverage."""
    table = []
    for low, high in zip(RELIABILITY_BINS, RELIABILITY_BINS[1:]):
        band = [o for o in outcomes if low <= o.confidence < high]
        table.append({"band": f"{low:.1f}-{min(high, 1.0):.1f}", "n": len(band),
                      "mean_confidence": _mean_float([o.confidence for o in band]),
                      "accuracy": _ratio(sum(o.right for o in band), len(band))})
    sure = [o for o in outcomes if not o.unsure]
    labelled = [o for o in sure if o.confidence >= LABEL_CONFIDENCE]
    unsure = [o for o in outcomes if o.unsure]
    return {
        "reliability": table,
        "sure_share": _ratio(len(sure), len(outcomes)),
        "sure_precision": _ratio(sum(o.right for o in sure), len(sure)),
        "labelled_share": _ratio(len(labelled), len(outcomes)),
        "labelled_precision": _ratio(sum(o.right for o in labelled), len(labelled)),
        # an unsure verdict names two categories: right when the true one is among them
        "unsure_top_two": _ratio(sum(o.record.category in o.pair for o in unsure), len(unsure)),
    }


def _mean_float(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 3) if values else None


def _ratio(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def evaluate(records: list[Record], model: Scorer | None, calibrate: bool = True) -> Report:
    report = Report()
    for record in records:
        found = classify_text(record.excerpt, failed=True, use_model=False)
        failure = found[0]
        rules_only = failure.category
        add_opinions([failure], model=model, calibrate=calibrate)
        clean = classify_text(record.excerpt, use_model=False)
        report.outcomes.append(Outcome(
            record, failure.category, rules_only, failure.decided_by, failure.confidence,
            line_found=failure.line.strip() == record.failure_line.strip(), no_failure=not clean,
            unsure=bool(failure.unsure), pair=tuple(failure.unsure)))
    return report


def cross_validate(records: list[Record], folds: int = 5, calibrate: bool = True, extra: list[Record] = (),
                   **params) -> list[Report]:
    """Grouped K-fold by thread over `records`: per fold, train on the rest (and on `extra`,
    training-only records of other threads) and evaluate."""
    from sklearn.model_selection import GroupKFold  # deferred: scikit-learn is heavy (model.py)

    groups = [r.thread for r in records]
    results = []
    for fit_index, test_index in GroupKFold(n_splits=folds).split(records, groups=groups):
        model = train([records[i] for i in fit_index] + list(extra), failure_of_excerpt, **params)
        results.append(evaluate([records[i] for i in test_index], model, calibrate))
    return results


def fit_calibration(outcomes: list[Outcome]) -> list[tuple[float, float]]:
    """Pool-adjacent-violators on (raw confidence, right): a non-decreasing step function,
    each step at least MIN_STEP records wide, as (raw upper bound, share right) knots."""
    points = sorted((o.confidence, 1.0 if o.right else 0.0) for o in outcomes)
    blocks: list[list[float]] = []  # [upper, sum right, count]
    for raw, right in points:
        blocks.append([raw, right, 1])
        while len(blocks) > 1 and (blocks[-2][1] / blocks[-2][2] >= blocks[-1][1] / blocks[-1][2]
                                   or blocks[-2][2] < MIN_STEP):
            upper, total, count = blocks.pop()
            blocks[-1] = [upper, blocks[-1][1] + total, blocks[-1][2] + count]
    if len(blocks) > 1 and blocks[-1][2] < MIN_STEP:
        upper, total, count = blocks.pop()
        blocks[-1] = [upper, blocks[-1][1] + total, blocks[-1][2] + count]
    return [(round(upper, 4), round(total / count, 3)) for upper, total, count in blocks]


def write_calibration(knots: list[tuple[float, float]], corpus: str, folds: int) -> None:
    lines = ["# Confidence calibration: raw confidence (decide.py) up to `upper` -> how often such a",
             f"# decision was right, fitted by `etriage eval {Path(corpus).name} --cv {folds} --calibrate`",
             "# (pool-adjacent-violators over the folds' held-out records). Read by decide.calibrated.",
             "knots:"]
    lines += [f"  - [{upper}, {right}]" for upper, right in knots]
    CALIBRATION_FILE.write_text("\n".join(lines) + "\n", encoding="utf-8")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("corpus", metavar="CORPUS.jsonl", help="labelled records to evaluate")
    parser.add_argument("--train", default=os.pathsep.join(str(p) for p in (TRAIN_FILE, *generated_files()) if p.exists()),
                        help="training records, files joined by ':' (default: the shipped train.jsonl and "
                             "generated/*.jsonl)")
    parser.add_argument("--cv", type=int, metavar="K", default=0,
                        help="grouped K-fold cross-validation on CORPUS instead (use the training part); "
                             "every fold also trains on --train's records of other threads (generated/*.jsonl)")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--calibrate", action="store_true",
                        help="with --cv: fit the confidence calibration on the folds' raw confidences and "
                             "write it to triage_rules/calibration.yaml")


def run(args: argparse.Namespace) -> int:
    try:
        records = load_corpus(args.corpus)
        threads = {r.thread for r in records}
        # training records of other threads: with --cv, every fold trains on them too
        training = [r for path in args.train.split(os.pathsep) if path
                    for r in load_corpus(path) if r.thread not in threads]
        if args.cv and args.calibrate:
            knots = fit_calibration([o for r in cross_validate(records, args.cv, calibrate=False, extra=training)
                                     for o in r.outcomes])
            write_calibration(knots, args.corpus, args.cv)
            print(f"calibration: {len(knots)} knots written to {CALIBRATION_FILE}", file=sys.stderr)
            calibration.cache_clear()
        if args.cv:
            folds = cross_validate(records, args.cv, extra=training)
            summary = _mean(folds)
            summary["trained_on"] = f"the other folds and {len(training)} training-only records"
        else:
            model = train(training, failure_of_excerpt) if training else None
            summary = evaluate(records, model).summary()
            summary["trained_on"] = len(training)
    except CorpusError as exc:
        print(f"etriage eval: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        print(json.dumps(summary, indent=1))
    else:
        print(render(summary))
    return 0


def _mean(reports: list[Report]) -> dict:
    """The folds' outcomes pooled (every record counted once, as the evaluation split's figures
    are: a mean of per-fold ratios would weigh a fold's 5 multi-method records like another's
    11), with each fold's own accuracy beside."""
    pooled = Report([o for r in reports for o in r.outcomes]).summary()
    keys = ("records", "accuracy", "rules_only_accuracy", "decided_by_rule", "decided_by_model", "no_failure_without_failed",
            "primary_line_is_labelled_line", "focus_accuracy", "per_category", "confusion", "worst_pairs")
    out = {k: pooled[k] for k in keys}
    out["folds"] = [r.summary()["accuracy"] for r in reports]
    out.update(sureness([o for r in reports for o in r.outcomes]))
    return out


def render(summary: dict) -> str:
    pct = lambda v: "  n/a" if v is None else f"{100 * v:5.1f}%"  # noqa: E731
    lines = [f"records: {summary['records']}" + (f" (model trained on {summary['trained_on']})" if "trained_on" in summary else ""),
             f"accuracy: {pct(summary['accuracy'])}   rules alone: {pct(summary['rules_only_accuracy'])}"]
    if "folds" in summary:
        lines.append("folds: " + " ".join(pct(a) for a in summary["folds"]))
    lines.append(f"no failure found without --failed: {pct(summary['no_failure_without_failed'])}   "
                 f"primary line = labelled line: {pct(summary['primary_line_is_labelled_line'])}")
    if "decided_by_rule" in summary:
        lines.append(f"decided by a rule: {pct(summary['decided_by_rule'])}   by the model: {pct(summary['decided_by_model'])}")
    lines.append("focus categories: " + ", ".join(f"{c} {pct(v)}" for c, v in summary["focus_accuracy"].items()))
    lines.append(f"sure (one category stated, not 'X or Y'): {pct(summary['sure_share'])} of records, precision "
                 f"{pct(summary['sure_precision'])}; unsure ones name the true category among their two: "
                 f"{pct(summary['unsure_top_two'])}")
    lines.append(f"labelled (sure and confidence >= {LABEL_CONFIDENCE}): {pct(summary['labelled_share'])} of records, "
                 f"precision {pct(summary['labelled_precision'])}")
    lines.append("reliability (stated confidence -> how often right): " + "; ".join(
        f"{row['band']}: n={row['n']}" + (f", mean {row['mean_confidence']:.2f}, right {pct(row['accuracy']).strip()}"
                                          if row["n"] else "") for row in summary["reliability"]))
    if "per_category" in summary:
        lines.append("")
        lines.append(f"{'category':24} {'n':>4} {'precision':>9} {'recall':>7} {'rules':>7}")
        for category, row in summary["per_category"].items():
            lines.append(f"{category:24} {row['support']:>4} {pct(row['precision']):>9} {pct(row['recall']):>7} "
                         f"{pct(row['rules_only_accuracy']):>7}")
        lines.append("")
        lines.append("worst confusions (true -> predicted: count):")
        lines.extend(f"  {p['true']} -> {p['predicted']}: {p['count']}" for p in summary["worst_pairs"])
        lines.append("")
        lines.append("confusion matrix (rows: true, columns: predicted):")
        short = {c: c[:6] for c in CATEGORIES}
        lines.append(" " * 24 + " ".join(f"{short[c]:>6}" for c in CATEGORIES))
        for true, row in summary["confusion"].items():
            lines.append(f"{true:24}" + " ".join(f"{row.get(c, 0) or '.':>6}" for c in CATEGORIES))
    return "\n".join(lines)
