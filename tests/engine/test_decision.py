"""One decision from a rule and the model's opinion: who decided, how sure, what the label says."""
from __future__ import annotations

import pytest

from triage_rules.corpus import generated_files, load_corpus
from triage_rules.decide import calibrated, decide
from triage_rules.engine import classify_text
from triage_rules.scorer import Opinion
from triage_rules.records import CATEGORIES


def opinion(**probabilities: float) -> Opinion:
    rest = (1 - sum(probabilities.values())) / (len(CATEGORIES) - len(probabilities))
    return Opinion({c: probabilities.get(c, rest) for c in CATEGORIES}, ())


def rules_reading(line: str):
    return classify_text(line + "\n", use_model=False)[0]


@pytest.mark.parametrize(
    "line, rule, probabilities, category, decided_by",
    [
        # a generic rule (a bare exception) is weak evidence: a confident model overrules it
        ("ValueError: bad cache index", "python-exception", {"mutable_buffer": 0.8}, "mutable_buffer", "model"),
        # ... and a model that only leans decides too (weak evidence adds nothing), unsure (below)
        ("ValueError: bad cache index", "python-exception", {"mutable_buffer": 0.2}, "mutable_buffer", "model"),
        # ... but `other` names no cause: a model that only finds the text unfamiliar keeps the
        # weak rule's reading (a timeout stays a timeout), and overrules it when confident
        ("RuntimeError: Process 0 terminated or timed out after 310.01 seconds", "runtime-timeout",
         {"other": 0.3}, "runtime_error", "runtime-timeout"),
        ("RuntimeError: Process 0 terminated or timed out after 310.01 seconds", "runtime-timeout",
         {"other": 0.7}, "other", "model"),
        # a specific rule holds against a model that leans elsewhere
        ("error: device offline", "device-offline", {"ci_infra": 0.5, "device_infra": 0.3}, "device_infra", "device-offline"),
        # ... and gives way only when the model is nearly sure and gives the rule's category nothing
        ("error: device offline", "device-offline", {"ci_infra": 0.95, "device_infra": 0.0}, "ci_infra", "model"),
        # etriage's own probes are never overruled
        ("ProbeFailure: [mutable_buffer] k_cache became a constant", "probe-failure", {"lint": 0.99},
         "mutable_buffer", "probe-failure"),
    ],
)
def test_rule_strength_against_the_model(line, rule, probabilities, category, decided_by):
    failure = rules_reading(line)
    assert failure.rule == rule
    decide(failure, opinion(**probabilities))
    assert (failure.category, failure.decided_by) == (category, decided_by)
    assert 0 < failure.confidence <= 1


def test_a_model_that_only_leans_over_a_weak_rule_says_it_is_unsure():
    failure = rules_reading("ValueError: bad cache index")
    decide(failure, opinion(mutable_buffer=0.2))
    assert failure.unsure and failure.unsure[0] == "mutable_buffer" and failure.confidence < 0.8


def test_a_model_decision_carries_its_category_texts_and_keeps_the_exception():
    failure = rules_reading("ValueError: bad cache index")
    decide(failure, opinion(mutable_buffer=0.8))
    assert failure.title == "Mutable buffer / KV cache state broke"
    assert "ValueError" in failure.explanation and "bad cache index" in failure.explanation
    assert failure.exception == "ValueError"
    assert failure.confidence == calibrated(0.8)  # the model's 0.8, as often right as the calibration says


@pytest.mark.parametrize("confidence, environment", [(0.9, True), (0.4, False)])
def test_an_infrastructure_category_blames_the_environment_only_when_the_model_is_sure(confidence, environment):
    failure = rules_reading("RuntimeError: step 3 went wrong")
    decide(failure, opinion(device_infra=confidence))
    assert failure.category == "device_infra"
    assert failure.environment is environment


def test_the_shipped_model_gives_every_failure_a_decision_and_neighbours():
    failures = classify_text(
        "adb: error: failed to get feature set: device 'R58M12ABCDE' not found\n"
        "Traceback (most recent call last):\n"
        "subprocess.CalledProcessError: Command '['adb', '-s', 'R58M12ABCDE', 'push']' returned non-zero exit status 1.\n"
    )
    assert failures
    first = failures[0]
    assert first.category == "device_infra"
    assert first.decided_by and 0 < first.confidence <= 1
    assert first.looks_like and all(n["source"].startswith("http") for n in first.looks_like)
    assert first.to_dict()["decided_by"] == first.decided_by


def test_a_neighbour_is_a_public_failure_never_a_record_generated_here():
    """Generated records (mutants, undone fixes) train the model, but "looks like" names failures
    seen in public: a generated record's own excerpt, nearest to itself, does not bring it back."""
    generated = [r for path in generated_files() for r in load_corpus(path)]
    sources = {r.source for r in generated}
    for record in [r for r in generated if r.category == "multi_method_lowering"][:3]:
        [failure, *_] = classify_text(record.excerpt, failed=True)
        assert not {n["source"] for n in failure.looks_like} & sources, record.id


def test_the_guarded_property_of_the_failing_test_decides_over_the_exception_layer():
    log = (
        "FAILED exir/backend/test/test_to_backend_multi_method.py::TestToBackendMultiMethod::"
        "test_multi_method_to_backend_two_methods_different_backends - "
        "executorch.exir.verification.verifier.SpecViolationError: Operator torch._ops.aten.foo.default is not Aten Canonical.\n"
    )
    first = classify_text(log)[0]
    assert first.exception.endswith("SpecViolationError")
    assert first.category == "multi_method_lowering"
    assert first.decided_by in ("test-area", "mm-test-failed", "model")
    assert "SpecViolationError" in first.explanation or "Aten Canonical" in first.explanation
    kv = classify_text("FAILED test/test_llama.py::test_kv_cache_update - AssertionError: tensors differ\n")[0]
    assert kv.category == "mutable_buffer"
    plain = classify_text("FAILED test/test_ops.py::test_add - executorch.exir.verification.verifier."
                          "SpecViolationError: Operator torch._ops.aten.foo.default is not Aten Canonical.\n")[0]
    assert plain.category == "export_failure"


def test_a_specific_rules_own_words_are_not_structure_against_it():
    """A KV cache with no room names the KV cache: the structure's `kv_cache` signal (pointing
    to mutable_buffer) is what the rule already read in its line, so it does not overrule the
    rule. The same signal found outside the rule's line still weighs."""
    kv = {"mutable_buffer": (0.9, ("kv_cache 0.90 (table + 40 of 44 training records)",))}
    leaning = {c: p for c, p in opinion(mutable_buffer=0.45, runtime_error=0.35).probabilities.items()}
    failure = rules_reading("update_slots : failed to find free space in the KV cache, retrying with smaller n_batch")
    assert failure.rule == "kv-cache-capacity"
    decide(failure, Opinion(leaning, (), structure=kv))
    assert (failure.category, failure.decided_by) == ("runtime_error", "kv-cache-capacity")
    assert any("kv_cache (towards mutable_buffer) is in the rule's own line" in e for e in failure.decision)
    elsewhere = rules_reading("AssertionError: Tensor-likes are not close!")
    assert elsewhere.rule == "numeric-not-close"
    decide(elsewhere, Opinion(leaning | {"numerical_mismatch": 0.05}, (), structure=kv))
    assert (elsewhere.category, elsewhere.decided_by) == ("mutable_buffer", "structure")


QNN_BUILDER_FAILURE = "gen-qnn-op_add-47-16-swap_arguments-attention"  # corpus/untrained, real HTP lowering output


def _qnn_builder_failure(test: str | None):
    from triage_rules.corpus import UNTRAINED_DIR
    from triage_rules.engine import add_opinions

    [record] = [r for r in load_corpus(UNTRAINED_DIR / "qnn_simulator_of_executorch.jsonl") if r.id == QNN_BUILDER_FAILURE]
    failure = classify_text(record.excerpt, failed=True, use_model=False)[0]
    failure.test = test
    add_opinions([failure])
    return failure


def test_the_stack_around_a_frame_a_specific_rule_read_is_not_structure_against_it():
    """A QNN op builder raising under to_backend and the partitioner (real output of a mutant
    lowered to HTP): `qnn-builder-frames` read the builder's frame. to_backend and the partitioner
    are on the stack of every lowering failure, so their learned pull to multi-method does not
    count against the rule; before, it decided `multi_method_lowering` (structure, 0.98)."""
    failure = _qnn_builder_failure(None)
    assert failure.rule == "qnn-builder-frames"
    assert any("to_backend, partitioner (towards multi_method_lowering) is only the stack around the frame the "
               "rule read" in e for e in failure.decision), failure.decision
    assert failure.decided_by != "structure"
    assert not any(e.startswith("structure points to multi_method_lowering") for e in failure.decision)


@pytest.mark.parametrize("test", [
    "backends/qualcomm/tests/test_qnn_delegate.py::TestQNNFloatingPointOperator::test_qnn_backend_element_wise_add",
    "backends/qualcomm/tests/test_qnn_delegate.py::TestQNNQuantizedOperator::test_qnn_backend_element_wise_add",
    "qnn_ops::layout_transformed_ops_on_htp",
])
def test_a_qnn_operator_test_guards_op_validation(test):
    """In the bot's own QNN runs (upstream's per-operator test classes, etriage's op probes) the
    failing test's area decides with the rule that read the builder's frame."""
    failure = _qnn_builder_failure(test)
    assert (failure.category, failure.decided_by) == ("qnn_op_validation", "qnn-builder-frames")
    assert "the failing test guards qnn_op_validation (weight 0.5)" in failure.decision


@pytest.mark.parametrize("test, area", [
    ("backends/qualcomm/tests/test_qnn_delegate.py::TestQNNFloatingPointModel::test_qnn_backend_llama", None),
    ("backends/qualcomm/tests/test_qnn_delegate.py::TestQNNQuantizedUtils::test_qnn_backend_multi_graphs",
     "multi_method_lowering"),
    ("qnn_ops::layout_transformed_ops_on_htp", "qnn_op_validation"),
    ("tests/test_my_qnn_ops_helper.py::test_x", None),
])
def test_what_a_test_name_guards(test, area):
    from triage_rules.decide import guarded_area

    assert guarded_area(test) == area
