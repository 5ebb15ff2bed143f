"""The compiled scorer (numpy arrays) answers exactly as the scikit-learn model it came from
(that a classification never imports scikit-learn: test_model_cache.py)."""
from __future__ import annotations

import numpy as np
import pytest

from triage_rules.corpus import TRAIN_FILE, load_corpus
from triage_rules.engine import failure_of_excerpt
from triage_rules.model import FailureModel, fields_of, opinions, tokens_of
from triage_rules.scorer import char_wb_ngrams


@pytest.mark.parametrize("text", [
    "RuntimeError: Expected  all tensors\tto be on the same device",
    "a",  # a word shorter than n counts once
    "SpecViolationError: call_module is not valid: got a class 'fused_first_tag1'",
    "",
])
def test_char_ngrams_are_scikit_learns(text):
    from sklearn.feature_extraction.text import TfidfVectorizer

    for low, high in ((3, 5), (4, 5)):
        analyzer = TfidfVectorizer(analyzer="char_wb", ngram_range=(low, high)).build_analyzer()
        assert char_wb_ngrams(text, low, high) == analyzer(text)


def test_scorer_probabilities_equal_scikit_learns():
    records = load_corpus(TRAIN_FILE)[::5]
    docs = [fields_of(failure_of_excerpt(r.excerpt)) for r in records]
    model = FailureModel()
    scorer = model.fit(docs, [r.category for r in records], records)
    expected = model.classifier.predict_proba(model.matrix)
    for row, doc in enumerate(docs[:40]):
        vector = scorer.vector(tokens_of(doc))
        dense = np.zeros(model.matrix.shape[1])
        dense[list(vector)] = list(vector.values())
        assert np.allclose(dense, model.matrix[row].toarray()[0], atol=1e-12)
        assert np.allclose(scorer.probabilities(vector), expected[row], atol=1e-9)
    # a record's nearest neighbour is itself
    [first] = opinions(scorer, docs[:1])
    assert first.nearest[0].source == records[0].source and first.nearest[0].similarity == pytest.approx(1.0)
