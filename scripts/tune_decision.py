"""Choose the engine's weights by grouped cross-validation on the training part only (never on
the evaluation split): for each weight of the generated records in training
(model.GENERATED_WEIGHT), the fold models are trained once; then every candidate setting of
decide.STRUCTURE_WEIGHT, decide.AREA_WEIGHT and decide.MODEL_FLOOR is scored on the same
held-out folds (public records only: the generated ones train every fold).

    .venv/bin/python scripts/tune_decision.py [--corpus tests/engine/corpus/train.jsonl] [--folds 5]
        [--generated-weights 0.5,1.0] [--quick]

Prints accuracy, the focus categories' accuracy and the labelled precision per setting.
"""
from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from triage_rules import decide  # noqa: E402
from triage_rules.corpus import TRAIN_FILE, generated_files, load_corpus  # noqa: E402
from triage_rules.evaluate import evaluate, failure_of_excerpt, sureness  # noqa: E402
from triage_rules.model import train  # noqa: E402

STRUCTURE = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
AREA = (0.3, 0.5, 0.7)
FLOOR = (0.0, 0.15, 0.3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=TRAIN_FILE)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--generated-weights", default="1.0",
                        help="comma-separated weights of a generated record in training")
    parser.add_argument("--quick", action="store_true", help="only the shipped decision weights")
    args = parser.parse_args()
    from sklearn.model_selection import GroupKFold  # deferred: heavy, and tuning only

    records = load_corpus(args.corpus)
    threads = {r.thread for r in records}
    extra = [r for path in generated_files() for r in load_corpus(path) if r.thread not in threads]
    print(f"{len(records)} records, {len(extra)} training-only (generated), {args.folds} grouped folds")
    shipped = (decide.STRUCTURE_WEIGHT, decide.AREA_WEIGHT, decide.MODEL_FLOOR)
    grid = [shipped] if args.quick else list(itertools.product(STRUCTURE, AREA, FLOOR))
    for weight in (float(w) for w in args.generated_weights.split(",")):
        folds = []
        for fit, held in GroupKFold(n_splits=args.folds).split(records, groups=[r.thread for r in records]):
            model = train([records[i] for i in fit] + extra, failure_of_excerpt, generated_weight=weight)
            folds.append((model, [records[i] for i in held]))
        for structure, area, floor in grid:
            decide.STRUCTURE_WEIGHT, decide.AREA_WEIGHT, decide.MODEL_FLOOR = structure, area, floor
            outcomes = [o for model, held in folds for o in evaluate(held, model).outcomes]
            right = sum(o.right for o in outcomes) / len(outcomes)
            focus = {c: [o.right for o in outcomes if o.record.category == c]
                     for c in ("multi_method_lowering", "mutable_buffer")}
            sure = sureness(outcomes)
            print(f"generated {weight:.2f} structure {structure:.1f} area {area:.1f} floor {floor:.2f}: "
                  f"accuracy {right:.1%}, "
                  + ", ".join(f"{c} {sum(v) / len(v):.1%}" for c, v in focus.items())
                  + f", labelled {sure['labelled_share']:.1%} at {sure['labelled_precision']:.1%}", flush=True)
    decide.STRUCTURE_WEIGHT, decide.AREA_WEIGHT, decide.MODEL_FLOOR = shipped
    return 0


if __name__ == "__main__":
    sys.exit(main())
