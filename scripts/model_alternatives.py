"""How far other learners and a perfect failure line get on the training part, by the same grouped
cross-validation as `etriage eval --cv` (folds by source thread; the generated records train every
fold; the model's opinion alone, before the decision's rules, structure and test area):

    .venv/bin/python scripts/model_alternatives.py [--folds 5]

- `shipped`: the engine's learner (TF-IDF blocks, logistic regression; model.FailureModel);
- `linear SVM`, `complement NB`, `5-NN`: other learners on the same features;
- `shipped + SVM`: the two averaged;
- `perfect line`: the shipped learner given the labelled failure line as the primary line and
  the excerpt's lines around it as context (what a perfect extractor would give it).

It answers "would another model do much better?" before anyone spends a week on one; it never
reads the evaluation split.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from triage_rules.corpus import TRAIN_FILE, generated_files, load_corpus  # noqa: E402
from triage_rules.engine import failure_of_excerpt  # noqa: E402
from triage_rules.model import CHAR_NGRAMS, FailureModel, fields_of, tokens_of  # noqa: E402

FOCUS = ("multi_method_lowering", "mutable_buffer")


def perfect_line(record, fields: dict[str, str]) -> dict[str, str]:
    lines = record.excerpt.split("\n")
    at = lines.index(record.failure_line)
    return dict(fields, line=record.failure_line, context="\n".join(lines[max(0, at - 15):at] + lines[at + 1:at + 9]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folds", type=int, default=5)
    args = parser.parse_args()
    # deferred: heavy, and only this experiment needs them
    from scipy.sparse import hstack
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.model_selection import GroupKFold
    from sklearn.naive_bayes import ComplementNB
    from sklearn.svm import LinearSVC

    records = load_corpus(TRAIN_FILE)
    threads = {r.thread for r in records}
    extra = [r for path in generated_files() for r in load_corpus(path) if r.thread not in threads]
    docs = [fields_of(failure_of_excerpt(r.excerpt)) for r in records]
    extra_docs = [fields_of(failure_of_excerpt(r.excerpt)) for r in extra]
    labels = np.array([r.category for r in records])
    extra_labels = [r.category for r in extra]
    folds = list(GroupKFold(n_splits=args.folds).split(records, groups=[r.thread for r in records]))
    classes = sorted(set(labels) | set(extra_labels))
    model = FailureModel()

    def matrices(train_docs, test_docs):
        train_tokens, test_tokens = [tokens_of(d) for d in train_docs], [tokens_of(d) for d in test_docs]
        blocks_train, blocks_test = [], []
        for block, weight in enumerate((1.0, model.char_weight, model.context_char_weight)):
            vectorizer = TfidfVectorizer(analyzer=lambda t: t, sublinear_tf=True, min_df=1 if block == 0 else 2)
            blocks_train.append(vectorizer.fit_transform([t[block] for t in train_tokens]) * weight)
            blocks_test.append(vectorizer.transform([t[block] for t in test_tokens]) * weight)
        return hstack(blocks_train).tocsr(), hstack(blocks_test).tocsr()

    def shipped(fit, held, view=docs):
        scorer = FailureModel().fit([view[i] for i in fit] + extra_docs, [labels[i] for i in fit] + extra_labels)
        rows = [scorer.probabilities(scorer.vector(tokens_of(view[i]))) for i in held]
        order = [scorer.classes.index(c) for c in classes]
        return np.array(rows)[:, order]

    def sklearn_learner(make):
        def run(fit, held):
            train_x, test_x = matrices([docs[i] for i in fit] + extra_docs, [docs[i] for i in held])
            learner = make().fit(train_x, [labels[i] for i in fit] + extra_labels)
            order = [list(learner.classes_).index(c) for c in classes]
            return learner.predict_proba(test_x)[:, order]
        return run

    def nearest(fit, held, k=5):
        train_x, test_x = matrices([docs[i] for i in fit] + extra_docs, [docs[i] for i in held])
        train_y = [labels[i] for i in fit] + extra_labels
        similarity = (test_x @ train_x.T).toarray()
        out = np.zeros((len(held), len(classes)))
        for row in range(len(held)):
            for j in np.argsort(-similarity[row])[:k]:
                out[row, classes.index(train_y[j])] += similarity[row, j]
        return out

    perfect = [perfect_line(r, d) for r, d in zip(records, docs)]
    learners = {
        "shipped": shipped,
        "linear SVM": sklearn_learner(lambda: CalibratedClassifierCV(LinearSVC(C=1.0, class_weight="balanced"), cv=3)),
        "complement NB": sklearn_learner(lambda: ComplementNB(alpha=0.3)),
        "5-NN": nearest,
        "perfect line": lambda fit, held: shipped(fit, held, perfect),
    }
    found: dict[str, np.ndarray] = {}
    print(f"{len(records)} records, {len(extra)} generated (training only), {args.folds} grouped folds; "
          f"char n-grams {CHAR_NGRAMS}")
    for name, learner in learners.items():
        found[name] = np.zeros((len(records), len(classes)))
        for fit, held in folds:
            found[name][held] = learner(fit, held)
        report(name, found[name], labels, classes)
    report("shipped + SVM", (found["shipped"] + found["linear SVM"]) / 2, labels, classes)
    return 0


def report(name: str, probabilities: np.ndarray, labels: np.ndarray, classes: list[str]) -> None:
    predicted = np.array(classes)[probabilities.argmax(axis=1)]
    focus = ", ".join(f"{c} {np.mean(predicted[labels == c] == c):.1%}" for c in FOCUS)
    print(f"{name:16} accuracy {np.mean(predicted == labels):.1%}  ({focus})", flush=True)


if __name__ == "__main__":
    sys.exit(main())
