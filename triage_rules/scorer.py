"""The fitted model as plain arrays, scored with numpy alone: what every classification runs.

Training (`model.FailureModel.fit`) uses scikit-learn; its result is compiled here into the
vocabularies, IDF weights, coefficients and the example matrix, stored in one `.npz` file read
with `allow_pickle=False`. Scoring a failure then costs numpy's import (about 0.1 s), never
scikit-learn's (about 2 s), so `etriage classify` starts in well under a second. The transform
is the one TfidfVectorizer applies (sublinear tf, smoothed IDF, l2 norm, char_wb n-grams) and
the probabilities are LogisticRegression's multinomial softmax; a test holds the two equal.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from triage_rules import structure
from triage_rules.records import CATEGORIES

FORMAT = 2
# A structural signal (structure.yaml) is evidence for the category the training records that
# show it mostly have: P(category | signal) learnt from those records, starting from
# SIGNAL_PRIOR pseudo-records of what the table expects (`points_to`: SIGNAL_BELIEF of them in
# that category; none: the categories' shares). It points there when that is more than
# SIGNAL_FLOOR and, for a signal the table gives no direction, SIGNAL_SUPPORT records show it.
SIGNAL_PRIOR = 4.0
SIGNAL_BELIEF = 0.9
SIGNAL_FLOOR = 0.5
SIGNAL_SUPPORT = 3
NEAREST = 3
NEAREST_FLOOR = 0.25  # cosine similarity below this is not "looks like"
# Thin evidence (a bare `AssertionError`) says little: probabilities are shrunk toward uniform by
# n / (n + EVIDENCE_K), n the number of distinct words the failure gives the model.
EVIDENCE_K = 8
_WHITE_SPACES = re.compile(r"\s\s+")


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
    reasons: tuple[str, ...] = ()  # the features that weigh most for the top category
    # category -> (learned weight, the signals that point to it, with their weight and support)
    structure: dict[str, tuple[float, tuple[str, ...]]] = field(default_factory=dict)

    @property
    def ranked(self) -> list[tuple[str, float]]:
        return sorted(self.probabilities.items(), key=lambda kv: -kv[1])

    @property
    def category(self) -> str:
        return self.ranked[0][0]


def char_wb_ngrams(text: str, low: int, high: int) -> list[str]:
    """scikit-learn's `char_wb` analyzer (lower-cased, n-grams inside words padded by spaces)."""
    out: list[str] = []
    for word in _WHITE_SPACES.sub(" ", text.lower()).split():
        word = f" {word} "
        for n in range(low, high + 1):
            offset = 0
            out.append(word[:n])
            while offset + n < len(word):
                offset += 1
                out.append(word[offset:offset + n])
            if offset == 0:  # a short word counts once
                break
    return out


@dataclass
class Block:
    """One TF-IDF vectorizer's part of the feature space: terms → columns from `offset`."""
    vocabulary: dict[str, int]
    idf: np.ndarray
    offset: int
    scale: float

    def features(self, tokens: list[str]) -> dict[int, float]:
        counts = Counter(t for t in tokens if t in self.vocabulary)
        if not counts:
            return {}
        values = {self.vocabulary[t]: (1.0 + math.log(n)) * float(self.idf[self.vocabulary[t]])
                  for t, n in counts.items()}
        norm = math.sqrt(sum(v * v for v in values.values())) or 1.0
        return {self.offset + column: self.scale * v / norm for column, v in values.items()}


class Scorer:
    """Probabilities per category and the nearest corpus records, from arrays only. It is given
    each block's tokens (model.tokens_of: training and scoring read a failure the same way)."""

    def __init__(self, blocks: list[Block], coef: np.ndarray, intercept: np.ndarray, classes: list[str],
                 examples: tuple[np.ndarray, np.ndarray, np.ndarray, int], example_info: list[tuple[str, str, str]],
                 key: str = "", signal_ids: list[str] = (), signal_counts: np.ndarray | None = None) -> None:
        self.blocks = blocks
        self.coef = coef  # (features, classes)
        self.intercept = intercept
        self.classes = classes
        # the word block of every corpus record, by column: indptr over columns, row indices, values
        self.example_indptr, self.example_rows, self.example_values, self.example_count = examples
        self.example_info = example_info
        self.key = key
        # training records per (structural signal, class): what each signal's weight is learnt from
        self.signal_ids = list(signal_ids)
        self.signal_counts = (np.zeros((0, len(classes))) if signal_counts is None
                              else np.asarray(signal_counts, dtype=np.float64))

    def pointing(self, found: list[str], expected: dict[str, str] | None = None) -> dict[str, tuple[float, tuple[str, ...]]]:
        """category -> (weight, signals) for the signals in `found` that point somewhere: the
        learned P(category | signal), the strongest signal's when several point one way.
        `expected`: signal -> the category the table expects (structure.yaml `points_to`)."""
        expected = structure.expected() if expected is None else expected
        shares = (self.signal_counts.sum(axis=0) if len(self.signal_counts) else np.zeros(len(self.classes))) + 1.0
        shares /= shares.sum()
        out: dict[str, tuple[float, tuple[str, ...]]] = {}
        row_of = {s: i for i, s in enumerate(self.signal_ids)}
        for signal in found:
            counts = self.signal_counts[row_of[signal]] if signal in row_of else np.zeros(len(self.classes))
            support = float(counts.sum())
            prior = shares
            if expected.get(signal) in self.classes:
                prior = (1 - SIGNAL_BELIEF) * shares
                prior[self.classes.index(expected[signal])] += SIGNAL_BELIEF
            elif support < SIGNAL_SUPPORT:
                continue
            learned = (counts + SIGNAL_PRIOR * prior) / (support + SIGNAL_PRIOR)
            best = int(np.argmax(learned))
            weight = float(learned[best])
            if weight <= SIGNAL_FLOOR:
                continue
            category = self.classes[best]
            table = "table + " if signal in expected else ""
            said = f"{signal} {weight:.2f} ({table}{int(counts[best])} of {int(support)} training records)"
            old_weight, old_said = out.get(category, (0.0, ()))
            out[category] = (max(weight, old_weight), (*old_said, said))
        return out

    def vector(self, tokens: list[list[str]]) -> dict[int, float]:
        out: dict[int, float] = {}
        for block, block_tokens in zip(self.blocks, tokens):
            out.update(block.features(block_tokens))
        return out

    def probabilities(self, vector: dict[int, float]) -> np.ndarray:
        logits = self.intercept.copy()
        if vector:
            columns = np.fromiter(vector.keys(), dtype=np.int64)
            values = np.fromiter(vector.values(), dtype=np.float64)
            logits += values @ self.coef[columns]
        logits -= logits.max()
        exp = np.exp(logits)
        return exp / exp.sum()

    def opinion(self, tokens: list[list[str]], evidence_words: int) -> Opinion:
        vector = self.vector(tokens)
        probs = self.probabilities(vector)
        keep = evidence_words / (evidence_words + EVIDENCE_K)
        full = {category: (1 - keep) / len(CATEGORIES) for category in CATEGORIES}
        for category, p in zip(self.classes, probs):
            full[category] += keep * float(p)
        signals = [t[2:] for t in tokens[0] if t.startswith("s:")] if tokens else []
        return Opinion(full, self._nearest(vector), self._reasons(vector, int(np.argmax(probs))),
                       self.pointing(signals))

    def _reasons(self, vector: dict[int, float], klass: int, count: int = 4) -> tuple[str, ...]:
        """The word-block features that pull most toward class `klass` (against the mean class)."""
        width = len(self.blocks[0].vocabulary)
        columns = [c for c in vector if c < width]
        if not columns:
            return ()
        if not hasattr(self, "_terms"):
            self._terms = sorted(self.blocks[0].vocabulary, key=self.blocks[0].vocabulary.get)
        weights = self.coef[columns]
        pull = np.array([vector[c] for c in columns]) * (weights[:, klass] - weights.mean(axis=1))
        order = np.argsort(-pull, kind="stable")[:count]
        return tuple(self._terms[columns[i]] for i in order if pull[i] > 0)

    def _nearest(self, vector: dict[int, float]) -> tuple[Neighbour, ...]:
        if not self.example_info:
            return ()
        similarity = np.zeros(self.example_count)
        width = len(self.blocks[0].vocabulary)
        for column, value in vector.items():
            if column >= width:
                continue  # only the word block is compared (see model.FailureModel.fit)
            start, end = self.example_indptr[column], self.example_indptr[column + 1]
            similarity[self.example_rows[start:end]] += value * self.example_values[start:end]
        found: list[Neighbour] = []
        seen: set[str] = set()
        for index in np.argsort(-similarity, kind="stable"):
            score = float(similarity[index])
            if score < NEAREST_FLOOR or len(found) == NEAREST:
                break
            source, category, line = self.example_info[index]
            if source in seen:
                continue
            seen.add(source)
            found.append(Neighbour(source, category, line, round(score, 3)))
        return tuple(found)

    # -- storage: one .npz, no pickled objects --------------------------------------------
    def save(self, path: Path) -> None:
        arrays: dict[str, np.ndarray] = {
            "format": np.array([FORMAT]), "key": np.array([self.key]),
            "coef": self.coef, "intercept": self.intercept, "classes": np.array(self.classes),
            "example_indptr": self.example_indptr, "example_rows": self.example_rows,
            "example_values": self.example_values, "example_count": np.array([self.example_count]),
            "example_info": np.array(self.example_info, dtype=str).reshape(-1, 3),
            "signal_ids": np.array(self.signal_ids, dtype=str), "signal_counts": self.signal_counts,
        }
        for index, block in enumerate(self.blocks):
            terms = sorted(block.vocabulary, key=block.vocabulary.get)
            arrays[f"terms{index}"] = np.array(terms, dtype=str)
            arrays[f"idf{index}"] = block.idf
            arrays[f"place{index}"] = np.array([block.offset, block.scale])
        with open(path, "wb") as handle:
            np.savez(handle, **arrays)

    @classmethod
    def load(cls, path: Path, key: str) -> "Scorer | None":
        """The stored scorer, or None when the file is not one for `key` (foreign or old)."""
        with np.load(path, allow_pickle=False) as data:
            if int(data["format"][0]) != FORMAT or str(data["key"][0]) != key:
                return None
            blocks = []
            index = 0
            while f"terms{index}" in data:
                terms = data[f"terms{index}"].tolist()
                offset, scale = data[f"place{index}"].tolist()
                blocks.append(Block(dict(zip(terms, range(len(terms)))), data[f"idf{index}"], int(offset), scale))
                index += 1
            info = [tuple(row) for row in data["example_info"].tolist()]
            return cls(blocks, data["coef"], data["intercept"], data["classes"].tolist(),
                       (data["example_indptr"], data["example_rows"], data["example_values"],
                        int(data["example_count"][0])), info, key,
                       data["signal_ids"].tolist(), data["signal_counts"])

