"""The learned second opinion: a linear model over n-grams of a failure, trained from the corpus.

    Failure ─▶ fields (primary line, message, context and evidence lines, exception type, frame
    files, test id, job name) ─▶ word n-grams per field + character n-grams of the line (TF-IDF)
    ─▶ logistic regression (probabilities per category) + the nearest corpus records.

Training is deterministic and takes seconds; it uses scikit-learn, imported in `fit` only. The
fitted model is compiled to arrays (`scorer.Scorer`) and cached on disk as one `.npz`, keyed by
the corpus files' hash, this package's code and FEATURE_VERSION; a missing, corrupt or foreign
cache file is rebuilt from the corpus. Nothing is downloaded. Scoring imports numpy only.
"""
from __future__ import annotations

import functools
import os
import re
import tempfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import numpy as np

from triage_rules.corpus import EVAL_FILE, TRAIN_FILE, Record, corpus_hash, generated_files, load_corpus
from triage_rules.records import Failure
from triage_rules.scorer import Block, Opinion, Scorer, char_wb_ngrams
from triage_rules.structure import found_in

FEATURE_VERSION = "4"
# How much a generated record weighs in training against a public one (grouped CV on the
# training part, the generated records in every fold's training set: scripts/tune_decision.py).
# With the 173 mutant records: 0.1 85.5%, 0.25 85.7%, 0.5 85.5%, 1.0 85.2% (without them 86.1%);
# multi-method 63% at 0.1-0.5, 61% at 1.0 (58% without); mutable buffer 90% up to 0.25, 80% at 1.0.
GENERATED_WEIGHT = 0.25
MAX_CONTEXT_CHARS = 4000
CHAR_NGRAMS = (3, 5)
CONTEXT_CHAR_NGRAMS = (4, 5)

_HEX = re.compile(r"0x[0-9a-fA-F]+|\b[0-9a-f]{7,}\b")
_NUM = re.compile(r"\d+")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|<[A-Z]>")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


# -- features ---------------------------------------------------------------------------
def fields_of(failure: Failure, job_name: str | None = None) -> dict[str, str]:
    """What the model reads of a failure, as text per field."""
    context = "\n".join([*failure.evidence, *failure.context])[:MAX_CONTEXT_CHARS]
    return {
        "line": f"{failure.line}\n{failure.message}",
        "context": context,
        "exception": failure.exception or "",
        "frames": " ".join(f"{f.file} {f.function}" for f in failure.frames[-8:]),
        "test": failure.test or "",
        "job": job_name or "",
        "structure": " ".join(found_in(failure)),
    }


def _words(text: str) -> list[str]:
    text = _NUM.sub("0", _HEX.sub("0x", text))
    out: list[str] = []
    for word in _WORD.findall(text):
        low = word.lower()
        out.append(low)
        parts = [p.lower() for p in _CAMEL.findall(word) if len(p) > 1]
        if len(parts) > 1:
            out.extend(parts)
        if "_" in word.strip("_"):
            out.extend(p for p in low.split("_") if len(p) > 1)
    return out


def analyse(fields: dict[str, str]) -> list[str]:
    """Prefixed tokens: the same word means more on the failure line than in its context; and
    each distinct word once more unprefixed (`a:`), wherever it stood, so that scarce evidence
    spread over the line, the context and the frames adds up."""
    tokens: list[str] = []
    line = _words(fields["line"])
    tokens += ["l:" + w for w in line]
    tokens += [f"b:{a}_{b}" for a, b in zip(line, line[1:])]
    tokens += ["c:" + w for w in _words(fields["context"])]
    if fields["exception"]:
        tokens.append("x:" + fields["exception"].rsplit(".", 1)[-1].lower())
    tokens += ["f:" + w for w in _words(fields["frames"])]
    tokens += ["t:" + w for w in _words(fields["test"])]
    tokens += ["j:" + w for w in _words(fields["job"])]
    tokens += ["s:" + signal for signal in fields.get("structure", "").split()]
    tokens += sorted({"a:" + t.split(":", 1)[1] for t in tokens if t[0] in "lcftx"})
    return tokens


def _line_text(fields: dict[str, str]) -> str:
    return _NUM.sub("0", fields["line"].lower())


def _all_text(fields: dict[str, str]) -> str:
    return _NUM.sub("0", " ".join((fields["line"], fields["context"], fields["frames"])).lower())


# -- the model --------------------------------------------------------------------------
def tokens_of(doc: dict[str, str]) -> list[list[str]]:
    """Each feature block's tokens: prefixed words, the line's text, the neighbourhood's text
    (the last two are cut into character n-grams)."""
    return [analyse(doc), char_wb_ngrams(_line_text(doc), *CHAR_NGRAMS),
            char_wb_ngrams(_all_text(doc), *CONTEXT_CHAR_NGRAMS)]


def evidence_words(doc: dict[str, str]) -> int:
    return len({t for t in analyse(doc) if t[:2] in ("l:", "c:", "x:")})


def opinions(scorer: Scorer, docs: list[dict[str, str]]) -> list[Opinion]:
    return [scorer.opinion(tokens_of(doc), evidence_words(doc)) for doc in docs]


class FailureModel:
    """TF-IDF over prefixed word tokens and the line's character n-grams; logistic regression.
    Fitted with scikit-learn, then compiled to a Scorer (numpy arrays) that does all scoring."""

    def __init__(self, c: float = 20.0, char_weight: float = 0.6, context_char_weight: float = 1.2,
                 generated_weight: float = GENERATED_WEIGHT) -> None:
        self.c = c
        self.char_weight = char_weight
        self.context_char_weight = context_char_weight
        self.generated_weight = generated_weight

    def fit(self, docs: list[dict[str, str]], labels: list[str], records: list[Record] | None = None) -> Scorer:
        # deferred on purpose: scikit-learn costs seconds to import, paid by training only
        from scipy.sparse import hstack
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression

        tokens = [tokens_of(d) for d in docs]
        words = TfidfVectorizer(analyzer=lambda t: t, sublinear_tf=True, min_df=1)
        chars = TfidfVectorizer(analyzer=lambda t: t, sublinear_tf=True, min_df=2, max_features=60000)
        context_chars = TfidfVectorizer(analyzer=lambda t: t, sublinear_tf=True, min_df=2, max_features=80000)
        word_matrix = words.fit_transform([t[0] for t in tokens])
        matrix = hstack([word_matrix, chars.fit_transform([t[1] for t in tokens]) * self.char_weight,
                         context_chars.fit_transform([t[2] for t in tokens]) * self.context_char_weight]).tocsr()
        # Chosen by grouped cross-validation on the training part: a calibrated linear SVM
        # measured the same (80.5% vs 80.3%), so the simpler model with native probabilities.
        classifier = LogisticRegression(C=self.c, max_iter=3000, class_weight="balanced")
        # a generated record (real output of real broken code, produced here) counts for less than
        # a public one: many come from few programs, and public threads are what the bot meets
        weights = np.array([self.generated_weight if r.generated else 1.0 for r in records]
                           if records else [1.0] * len(labels))
        classifier.fit(matrix, labels, sample_weight=weights)
        self.classifier, self.matrix = classifier, matrix  # kept for the scorer's equivalence test
        blocks, offset = [], 0
        for vectorizer, scale in ((words, 1.0), (chars, self.char_weight), (context_chars, self.context_char_weight)):
            vocabulary = {term: int(column) for term, column in vectorizer.vocabulary_.items()}
            blocks.append(Block(vocabulary, np.asarray(vectorizer.idf_, dtype=np.float64), offset, scale))
            offset += len(vocabulary)
        # "looks like" names failures seen in public, each with its thread: a record generated here
        # (a mutant, an undone fix) trains the model but is no one's reference
        public = [i for i, r in enumerate(records)
                  if not r.generated] if records else list(range(len(labels)))
        by_column = word_matrix[public].tocsc()
        examples = (by_column.indptr.astype(np.int64), by_column.indices.astype(np.int64),
                    by_column.data.astype(np.float64), len(public))
        info = [(records[i].source, records[i].category, records[i].failure_line) for i in public] if records else []
        coef = np.ascontiguousarray(classifier.coef_.T, dtype=np.float64)
        classes = [str(c) for c in classifier.classes_]
        signal_ids = sorted({signal for d in docs for signal in d.get("structure", "").split()})
        counts = np.zeros((len(signal_ids), len(classes)))
        for doc, label in zip(docs, labels):
            for signal in set(doc.get("structure", "").split()):
                counts[signal_ids.index(signal), classes.index(label)] += 1
        return Scorer(blocks, coef, np.asarray(classifier.intercept_, dtype=np.float64),
                      classes, examples, info, signal_ids=signal_ids, signal_counts=counts)


def train(records: list[Record], read: Callable[[str], Failure], **params) -> Scorer:
    """A model fitted on `records`; `read` turns an excerpt into the Failure the engine sees
    (the engine passes its own rule-only reading of a failed job's log)."""
    docs = [fields_of(read(r.excerpt)) for r in records]
    return FailureModel(**params).fit(docs, [r.category for r in records], records)


# -- the default model: trained from the shipped corpus, cached ------------------------
def corpus_files() -> list[Path]:
    override = os.environ.get("ETRIAGE_CORPUS")
    paths = [Path(p) for p in override.split(os.pathsep)] if override else [TRAIN_FILE, EVAL_FILE, *generated_files()]
    return [p for p in paths if p.exists()]


def cache_dir() -> Path:
    base = os.environ.get("ETRIAGE_MODEL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "etriage")
    return Path(base)


@functools.lru_cache(maxsize=2)
def default_model(read: Callable[[str], Failure]) -> Scorer | None:
    """The model trained on every shipped corpus record; None when no corpus is there (the
    rules alone decide then). Loaded from the cache when its key matches, else trained."""
    paths = corpus_files()
    if not paths:
        return None
    # The key covers the corpus and the code that reads it (extraction, rules, features) and the
    # trainer's version, read from its metadata: importing scikit-learn is what scoring avoids.
    here = Path(__file__).parent
    code = [*sorted(here.glob("*.py")), *sorted(here.glob("rules/*.yaml")), here / "structure.yaml"]
    key = f"{corpus_hash(paths + code)}-f{FEATURE_VERSION}-sk{_sklearn_version()}"
    cached = cache_dir() / f"model-{key}.npz"
    try:
        scorer = Scorer.load(cached, key)
        if scorer is not None:
            return scorer
    except FileNotFoundError:
        pass
    except Exception:  # noqa: BLE001 - a corrupt or foreign cache is rebuilt, never trusted
        pass
    records = [r for path in paths for r in load_corpus(path)]
    scorer = train(records, read)
    scorer.key = key
    _store(cached, scorer)
    return scorer


def _sklearn_version() -> str:
    try:
        return metadata.version("scikit-learn")
    except metadata.PackageNotFoundError:
        return "none"


def _store(path: Path, scorer: Scorer) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("wb", dir=path.parent, suffix=".npz", delete=False) as handle:
            pass
        scorer.save(Path(handle.name))
        os.replace(handle.name, path)  # atomic: a reader never sees half a file
    except OSError:
        pass  # a read-only cache location costs a retrain next time, nothing else
