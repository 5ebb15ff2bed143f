"""How a probe's ending becomes a result: failure line, environment skip, error traceback, JUnit."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from tasks.probes.junit import to_junit
from tasks.probes.records import ProbeFailure, ProbeResult
from tasks.probes.runner import Probe, run_one
from tasks.probes.runtime import import_optional, require_backends


def _failing():
    raise ProbeFailure("method 'decode' lowered to  XnnpackBackend", ["problem: detail one", "problem: two"])


def _boom():
    raise RuntimeError("export failed: Could not guard on data-dependent expression")


def _missing_package():
    import_optional("etriage_no_such_package")


def _broken_executorch_import():
    import_optional("executorch.exir.no_such_module")


@pytest.mark.parametrize(
    "suite, func, outcome, first_line",
    [
        ("multi_method", _failing, "failed",
         "ProbeFailure: [multi_method_lowering] method 'decode' lowered to XnnpackBackend"),
        ("mutable_buffer", _failing, "failed",
         "ProbeFailure: [mutable_buffer] method 'decode' lowered to XnnpackBackend"),
        ("mutable_buffer", _boom, "error",
         "RuntimeError: export failed: Could not guard on data-dependent expression"),
        ("multi_method", _missing_package, "skipped",
         "ProbeEnvironment: etriage_no_such_package is not installed here"),
        ("multi_method", lambda: {"ok": 1}, "passed", "ok"),
    ],
)
def test_outcome_and_first_line(suite, func, outcome, first_line):
    result = run_one(Probe(suite, "p", func, f"tasks/probes/{suite}.py"))
    assert result.outcome == outcome
    assert result.diagnosis.splitlines()[0] == first_line
    assert result.message == first_line


def test_failure_keeps_details_and_error_keeps_traceback():
    failed = run_one(Probe("multi_method", "p", _failing, "x.py"))
    assert failed.diagnosis.splitlines()[1:] == ["problem: detail one", "problem: two"]
    errored = run_one(Probe("mutable_buffer", "p", _boom, "x.py"))
    assert "Traceback (most recent call last)" in errored.diagnosis
    assert "in _boom" in errored.diagnosis


def test_a_broken_executorch_module_is_an_error_not_the_environment():
    result = run_one(Probe("multi_method", "p", _broken_executorch_import, "x.py"))
    assert result.outcome == "error"
    assert "ModuleNotFoundError" in result.diagnosis


@pytest.mark.executorch
def test_unregistered_backend_is_an_environment_skip():
    result = run_one(Probe("multi_method", "p", lambda: require_backends("NoSuchBackend"), "x.py"))
    assert result.outcome == "skipped"
    assert result.diagnosis.startswith("ProbeEnvironment: backend NoSuchBackend is not registered")
    assert "XnnpackBackend" in result.diagnosis  # says what *is* registered


def test_junit_elements_per_outcome():
    results = [
        ProbeResult("multi_method", "a", "passed", "ok", duration=0.5, module="tasks/probes/multi_method.py"),
        ProbeResult("multi_method", "b", "failed", "ProbeFailure: [multi_method_lowering] x\nproblem: y",
                    module="tasks/probes/multi_method.py"),
        ProbeResult("mutable_buffer", "c", "error", "RuntimeError: z\nTraceback ...", module="tasks/probes/mutable_buffer.py"),
        ProbeResult("mutable_buffer", "d", "skipped", "ProbeEnvironment: no XNNPACK", module="tasks/probes/mutable_buffer.py"),
    ]
    suite = ET.fromstring(to_junit(results))
    assert (suite.get("name"), suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == (
        "etriage.probes", "4", "1", "1", "1")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert cases["a"].get("classname") == "probes.multi_method" and len(cases["a"]) == 0
    failure = cases["b"].find("failure")
    assert failure.get("message") == "ProbeFailure: [multi_method_lowering] x"
    assert failure.text == "ProbeFailure: [multi_method_lowering] x\nproblem: y"
    assert cases["c"].find("error").get("message") == "RuntimeError: z"
    assert cases["d"].find("skipped").get("message") == "ProbeEnvironment: no XNNPACK"
    assert cases["d"].get("file") == "tasks/probes/mutable_buffer.py"
