"""The learned second opinion: a linear model over n-grams of a failure, trained from the corpus.

    Failure ─▶ fields (primary line, message, context and evidence lines, exception type, frame
    files, test id, job name) ─▶ word n-grams per field + character n-grams of the line (TF-IDF)
    ─▶ logistic regression (probabilities per category) + the nearest corpus records.

Training is deterministic and takes seconds. The fitted model is cached on disk, keyed by the
corpus files' hash and this module's FEATURE_VERSION; a missing, corrupt or foreign cache file
is rebuilt from the corpus. Nothing is downloaded. scikit-learn is imported here only, so a
caller that never asks the model pays nothing for it.
"""
from __future__ import annotations

import functools
import os
import pickle
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from triage_rules.corpus import TRAIN_FILE, EVAL_FILE, Record, corpus_hash, load_corpus
from triage_rules.records import CATEGORIES, Failure

FEATURE_VERSION = "2"
MAX_CONTEXT_CHARS = 4000
NEAREST = 3
NEAREST_FLOOR = 0.25  # cosine similarity below this is not "looks like"
# Thin evidence (a bare `AssertionError`) says little: probabilities are shrunk toward uniform by
# n / (n + EVIDENCE_K), n the number of distinct words the failure gives the model.
EVIDENCE_K = 8

_HEX = re.compile(r"0x[0-9a-fA-F]+|\b[0-9a-f]{7,}\b")
_NUM = re.compile(r"\d+")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|<[A-Z]>")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


@dataclass(frozen=True)
class Neighbour:
    source: str
    category: str
    line: str
    similarity: float


@dataclass(frozen=True)
class Opinion:
    probabilities: dict[str, float]
    nearest: tuple[Neighbour, ...]

    @property
    def category(self) -> str:
        return max(self.probabilities, key=self.probabilities.get)


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
    tokens += sorted({"a:" + t.split(":", 1)[1] for t in tokens if t[0] in "lcftx"})
    return tokens


def _line_text(fields: dict[str, str]) -> str:
    return _NUM.sub("0", fields["line"].lower())


def _all_text(fields: dict[str, str]) -> str:
    return _NUM.sub("0", " ".join((fields["line"], fields["context"], fields["frames"])).lower())


# -- the model --------------------------------------------------------------------------
class FailureModel:
    """TF-IDF over prefixed word tokens and the line's character n-grams; logistic regression."""

    def __init__(self, c: float = 20.0, char_weight: float = 0.6, context_char_weight: float = 1.2) -> None:
        self.c = c
        self.char_weight = char_weight
        self.context_char_weight = context_char_weight

    def fit(self, docs: list[dict[str, str]], labels: list[str], records: list[Record] | None = None) -> "FailureModel":
        # deferred on purpose: scikit-learn costs a second to import, paid only by model users
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression

        self.words = TfidfVectorizer(analyzer=analyse, sublinear_tf=True, min_df=1)
        self.chars = TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), sublinear_tf=True, min_df=2,
                                     max_features=60000)
        self.context_chars = TfidfVectorizer(analyzer="char_wb", ngram_range=(4, 5), sublinear_tf=True, min_df=2,
                                             max_features=80000)
        word_matrix = self.words.fit_transform(docs)
        matrix = self._stack(word_matrix, self.chars.fit_transform([_line_text(d) for d in docs]),
                             self.context_chars.fit_transform([_all_text(d) for d in docs]))
        # Chosen by grouped cross-validation on the training part: a calibrated linear SVM
        # measured the same (80.5% vs 80.3%), so the simpler model with native probabilities.
        self.classifier = LogisticRegression(C=self.c, max_iter=3000, class_weight="balanced")
        self.classifier.fit(matrix, labels)
        self.examples = word_matrix
        self.example_info = [(r.source, r.category, r.failure_line) for r in records] if records else []
        return self

    def _stack(self, word_matrix, char_matrix, context_matrix):
        from scipy.sparse import hstack  # deferred with scikit-learn (see fit)

        return hstack([word_matrix, char_matrix * self.char_weight,
                       context_matrix * self.context_char_weight]).tocsr()

    def _matrix(self, docs: list[dict[str, str]]):
        word_matrix = self.words.transform(docs)
        return word_matrix, self._stack(word_matrix, self.chars.transform([_line_text(d) for d in docs]),
                                        self.context_chars.transform([_all_text(d) for d in docs]))

    def opinions(self, docs: list[dict[str, str]]) -> list[Opinion]:
        word_matrix, matrix = self._matrix(docs)
        probabilities = self.classifier.predict_proba(matrix)
        classes = list(self.classifier.classes_)
        similar = (word_matrix @ self.examples.T).toarray() if self.example_info else None
        out = []
        for row, probs in enumerate(probabilities):
            words = {t for t in analyse(docs[row]) if t[:2] in ("l:", "c:", "x:")}
            keep = len(words) / (len(words) + EVIDENCE_K)
            full = {category: (1 - keep) / len(CATEGORIES) for category in CATEGORIES}
            for c, p in zip(classes, probs):
                full[c] += keep * float(p)
            out.append(Opinion(full, self._nearest(similar[row]) if similar is not None else ()))
        return out

    def _nearest(self, similarity) -> tuple[Neighbour, ...]:
        found: list[Neighbour] = []
        seen: set[str] = set()
        for index in similarity.argsort()[::-1]:
            score = float(similarity[index])
            if score < NEAREST_FLOOR or len(found) == NEAREST:
                break
            source, category, line = self.example_info[index]
            if source in seen:
                continue
            seen.add(source)
            found.append(Neighbour(source, category, line, round(score, 3)))
        return tuple(found)


def train(records: list[Record], read: Callable[[str], Failure], **params) -> FailureModel:
    """A model fitted on `records`; `read` turns an excerpt into the Failure the engine sees
    (the engine passes its own rule-only reading of a failed job's log)."""
    docs = [fields_of(read(r.excerpt)) for r in records]
    return FailureModel(**params).fit(docs, [r.category for r in records], records)


# -- the default model: trained from the shipped corpus, cached ------------------------
def corpus_files() -> list[Path]:
    override = os.environ.get("ETRIAGE_CORPUS")
    paths = [Path(p) for p in override.split(os.pathsep)] if override else [TRAIN_FILE, EVAL_FILE]
    return [p for p in paths if p.exists()]


def cache_dir() -> Path:
    base = os.environ.get("ETRIAGE_MODEL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "etriage")
    return Path(base)


@functools.lru_cache(maxsize=2)
def default_model(read: Callable[[str], Failure]) -> FailureModel | None:
    """The model trained on every shipped corpus record; None when no corpus is there (the
    rules alone decide then). Loaded from the cache when its key matches, else trained."""
    paths = corpus_files()
    if not paths:
        return None
    import sklearn  # deferred (see FailureModel.fit): only its version, for the cache key

    # The key covers the corpus and the code that reads it (extraction, rules, features).
    code = sorted(Path(__file__).parent.glob("*.py")) + sorted(Path(__file__).parent.glob("rules/*.yaml"))
    key = f"{corpus_hash(paths + code)}-f{FEATURE_VERSION}-sk{sklearn.__version__}"
    cached = cache_dir() / f"model-{key}.pickle"
    try:
        with open(cached, "rb") as handle:
            model = pickle.load(handle)
        if isinstance(model, FailureModel) and getattr(model, "cache_key", None) == key:
            return model
    except FileNotFoundError:
        pass
    except Exception:  # noqa: BLE001 - a corrupt or foreign cache is rebuilt, never trusted
        pass
    records = [r for path in paths for r in load_corpus(path)]
    model = train(records, read)
    model.cache_key = key
    _store(cached, model)
    return model


def _store(path: Path, model: FailureModel) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("wb", dir=path.parent, delete=False) as handle:
            pickle.dump(model, handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(handle.name, path)  # atomic: a reader never sees half a file
    except OSError:
        pass  # a read-only cache location costs a retrain next time, nothing else
