"""JUnit XML: pytest's real --junit-xml output, nested suites, malformed input."""
from __future__ import annotations

import subprocess
import sys

import pytest

from triage_rules import classify_file, classify_text
from triage_rules.junit import JUnitError, read_junit

SAMPLE_TESTS = '''
import unittest

class TestLowering(unittest.TestCase):
    def test_ok(self):
        pass

    def test_close(self):
        import math
        assert math.isclose(1.0, 1.5), "Tensor-likes are not close! Mismatched elements: 3 / 4"

def test_backend():
    raise RuntimeError("Failed to execute method forward, error: 0x20")

def test_skipped():
    import pytest
    pytest.skip("no QNN SDK")
'''


@pytest.fixture(scope="module")
def pytest_junit(tmp_path_factory):
    """A JUnit file written by a real pytest run (xunit1 records the test file)."""
    root = tmp_path_factory.mktemp("junit")
    (root / "test_sample.py").write_text(SAMPLE_TESTS)
    report = root / "report.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "junit_family=xunit1",
         f"--junit-xml={report}", "test_sample.py"],
        cwd=root, capture_output=True, check=False, timeout=120,
    )
    return report


def test_reads_pytest_junit_cases(pytest_junit):
    cases = {case.name: case for case in read_junit(pytest_junit)}
    assert {c.outcome for c in cases.values()} == {"passed", "failed", "skipped"}
    assert cases["test_backend"].outcome == "failed"
    assert cases["test_backend"].test_id == "test_sample.py::test_backend"
    assert cases["test_close"].test_id == "test_sample.py::TestLowering::test_close"
    assert "0x20" in cases["test_backend"].message + cases["test_backend"].text
    assert cases["test_skipped"].outcome == "skipped"
    assert cases["test_ok"].time >= 0.0
    assert read_junit(pytest_junit.read_text()) == read_junit(pytest_junit)  # path or string


def test_classify_file_turns_failed_cases_into_failures(pytest_junit):
    failures = classify_file(pytest_junit)
    by_test = {f.test: f for f in failures}
    assert set(by_test) == {"test_sample.py::test_backend", "test_sample.py::TestLowering::test_close"}
    assert by_test["test_sample.py::TestLowering::test_close"].category == "numerical_mismatch"
    backend = by_test["test_sample.py::test_backend"]
    assert backend.category == "runtime_error" and "Error::NotFound" in backend.explanation
    lines = pytest_junit.read_text().split("\n")
    assert "<failure" in lines[backend.line_no - 1] or "<testcase" in lines[backend.line_no - 1]


def test_nested_testsuites_and_errors():
    xml = """<?xml version="1.0"?>
<testsuites>
  <testsuite name="outer">
    <testsuite name="inner">
      <testcase classname="exir.tests.test_passes.TestPasses" name="test_a" time="0.5">
        <error message="ImportError: No module named 'foo'">Traceback...</error>
      </testcase>
      <testcase classname="exir.tests.test_passes.TestPasses" name="test_b"/>
    </testsuite>
  </testsuite>
</testsuites>"""
    cases = read_junit(xml)
    assert [(c.test_id, c.outcome) for c in cases] == [
        ("exir.tests.test_passes.TestPasses.test_a", "error"),
        ("exir.tests.test_passes.TestPasses.test_b", "passed"),
    ]
    failures = classify_text(xml)
    assert [f.category for f in failures] == ["import_or_env"]


@pytest.mark.parametrize(
    "xml,message",
    [
        ("<testsuite><testcase name='x'></testsuite>", "malformed JUnit XML at line 1"),
        ("<root><child/></root>", "not JUnit XML"),
        ("<testsuite>\n<testcase name='a'>\n<failure>&bogus;</failure></testcase></testsuite>", "line 3"),
    ],
)
def test_malformed_xml_is_a_clear_error(xml, message):
    with pytest.raises(JUnitError, match=message):
        read_junit(xml)


def test_missing_file_is_a_junit_error(tmp_path):
    with pytest.raises(JUnitError, match="No such file"):
        read_junit(tmp_path / "nope.xml")
