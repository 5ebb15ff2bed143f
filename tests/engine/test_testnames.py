"""The failing test's own names are the test's area, weighed once (decide.AREA_WEIGHT): rules and
structural signals read the failure's words without them (triage_rules/testnames.py)."""
from __future__ import annotations

from triage_rules.engine import classify_text
from triage_rules.records import Failure, Frame
from triage_rules.structure import found_in
from triage_rules.testnames import is_test_file, without_names
from triage_rules.testnames import test_names as names_of

NODE = "backends/transforms/test/test_create_mutable_buffer.py::TestMutableBufferCreation::test_renamed[p1]"


def _log(error: str) -> str:
    return ("=================================== FAILURES ===================================\n"
            "______ TestMutableBufferCreation.test_renamed[p1] _______\n"
            "backends/transforms/test/test_create_mutable_buffer.py:12: in test_renamed\n"
            "    run()\n"
            f"E   {error}\n"
            "=========================== short test summary info ============================\n"
            f"FAILED {NODE} - {error}\n")


def test_a_test_is_named_by_its_node_id_file_class_and_function_never_by_its_folders():
    names = names_of(NODE, "FAIL: test_z (exir.tests.test_passes.TestPasses)")
    assert {"test_create_mutable_buffer.py", "test_create_mutable_buffer", "TestMutableBufferCreation",
            "test_renamed", "test_renamed[p1]", "test_z", "TestPasses", "test_passes"} <= set(names)
    assert not {"backends", "transforms", "exir", "tests"} & set(names)
    line = f"FAILED {NODE} - ModuleNotFoundError: No module named 'executorch.backends.transforms.x'"
    assert without_names(line, names) == "FAILED <test> - ModuleNotFoundError: No module named " \
                                         "'executorch.backends.transforms.x'"
    # a frame in any test file, not a linter's finding about one
    assert without_names("exir/tests/test_other.py:3: in helper", ()) == "<test file>:3: in helper"
    assert without_names("./tests/test_cmdline.py:255:128: E501 line too long", ()) == \
        "./tests/test_cmdline.py:255:128: E501 line too long"
    assert is_test_file("a/b/test_x.py") and is_test_file("x_test.py") and not is_test_file("a/testing.py")


def test_an_import_error_in_a_mutable_buffer_test_is_an_import_error():
    """Neither a buffer mutation lost (the test's name in the summary line) nor the test's area
    (categories.yaml `setup`: the test failed before reaching what it guards)."""
    [failure] = classify_text(_log("ModuleNotFoundError: No module named 'executorch.backends.foo'"))
    assert failure.rule == "env-import-name" and failure.category == "import_or_env", failure.decision
    assert "graph signature" not in failure.title
    assert not any("the failing test guards" in line for line in failure.decision)
    assert "buffer_mutation" not in found_in(failure)


def test_a_generic_failure_in_a_mutable_buffer_test_is_the_tests_area_said_once():
    [failure] = classify_text(_log("AssertionError: assert 2 == 3"))
    assert failure.category == "mutable_buffer" and failure.rule != "mb-mutation-lost", failure.decision
    assert any("the failing test guards mutable_buffer" in line for line in failure.decision)


def test_the_failures_own_words_still_name_the_mechanism():
    [failure] = classify_text(_log("AssertionError: 'b_cache' not in buffers_to_mutate"))
    assert failure.rule == "mb-mutation-lost" and failure.category == "mutable_buffer"
    assert "buffer_mutation" in found_in(failure)


def test_a_linter_finding_on_a_test_file_is_still_lint():
    [failure] = classify_text("./tests/test_cmdline.py:255:128: E501 line too long (178 > 127 characters)\n",
                              failed=True)
    assert failure.category == "lint" and failure.rule == "lint-flake8"


def test_structure_reads_no_frame_of_a_test_file():
    def failure(*frames: Frame) -> Failure:
        found = Failure(line="E   AssertionError", line_no=1)
        found.frames = list(frames)
        return found

    in_test = Frame("exir/backend/test/test_partitioner.py", 10, "test_partition_to_backend")
    in_code = Frame("exir/backend/canonical_partitioners/pattern_op_partitioner.py", 40, "generate_partitions")
    assert "partitioner" not in found_in(failure(in_test)) and "to_backend" not in found_in(failure(in_test))
    assert "partitioner" in found_in(failure(in_test, in_code))
