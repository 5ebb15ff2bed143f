"""The pytest plugin loaded into suite runs: `only` (merge-base runs, retries), `leave_out` (tests
learnt not to run here) and the time budget."""
from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from tasks.pipeline.suites import PLUGIN_DIR

CASES = [
    # config, expected {test id: outcome}
    ({"only": ["a/test_a.py::test_one", "a/test_a.py::test_missing_here"]}, {"a/test_a.py::test_one": "passed"}),
    ({"leave_out": ["a/test_a.py::test_two", "a/test_a.py::test_missing_here"]}, {"a/test_a.py::test_one": "passed"}),
    # budget already spent (negative): every test of the budgeted file is skipped, others run
    ({"budget": {"seconds": -1, "paths": ["a/test_b.py"]}},
     {"a/test_a.py::test_one": "passed", "a/test_a.py::test_two": "passed", "a/test_b.py::test_three": "skipped"}),
    ({"budget": {"seconds": 600, "paths": ["a/test_b.py"]}},
     {"a/test_a.py::test_one": "passed", "a/test_a.py::test_two": "passed", "a/test_b.py::test_three": "passed"}),
]


@pytest.mark.parametrize("config,expected", CASES, ids=["only", "leave-out", "over-budget", "within-budget"])
def test_plugin_filters_and_budgets(tmp_path, config, expected):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "test_a.py").write_text("def test_one():\n    pass\n\ndef test_two():\n    pass\n")
    (tmp_path / "a" / "test_b.py").write_text("def test_three():\n    pass\n")
    (tmp_path / "cfg.json").write_text(json.dumps(config))
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts =\n")
    files = ["a/test_a.py", "a/test_b.py"] if "budget" in config else ["a/test_a.py"]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "etriage_pytest",
                           "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path),
                           "--junit-xml", str(tmp_path / "j.xml"), *files],
                          cwd=tmp_path, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(PLUGIN_DIR),
                               "ETRIAGE_PYTEST_CONFIG": str(tmp_path / "cfg.json")})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = {}
    for case in ET.parse(tmp_path / "j.xml").getroot().iter("testcase"):
        outcome = "skipped" if case.find("skipped") is not None else "passed"
        found[f"{case.get('classname').replace('.', '/')}.py::{case.get('name')}"] = outcome
        if outcome == "skipped":
            assert "etriage: over the wall-clock safety limit" in case.find("skipped").get("message", "")
    assert found == expected


def test_the_qnn_backend_is_refused_without_an_sdk_so_collection_says_why(tmp_path):
    """Importing executorch.backends.qualcomm without QNN_SDK_ROOT would download the SDK: in a
    suite run it fails at collection with a line the engine files as an environment failure."""
    (tmp_path / "test_q.py").write_text("import executorch.backends.qualcomm\n\ndef test_q():\n    pass\n")
    (tmp_path / "test_other.py").write_text("import executorch.backends\n\ndef test_other():\n    pass\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts =\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "etriage_pytest",
                           "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path),
                           "--continue-on-collection-errors",  # as suites.pytest_command runs it
                           "--junit-xml", str(tmp_path / "j.xml"), "test_q.py", "test_other.py"],
                          cwd=tmp_path, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(PLUGIN_DIR)})
    assert proc.returncode != 0
    assert "refused by etriage, the QNN SDK is not available" in proc.stdout
    assert "1 passed" in proc.stdout and "1 error" in proc.stdout  # the other file still ran

    from triage_rules import classify_text

    [failure] = classify_text(proc.stdout, failed=True)[:1]
    assert failure.environment and failure.category == "qnn_sdk_or_toolchain"
