"""ExecuTorch's own C++ tests triaged for real, through `etriage triage --suite cxx_tests`, on
ExecuTorch v1.4.1's sources: the cxx_tests recipe builds the googletest binaries from the change's
tree (googletest from Debian's sources), the suite runs the changed operator's gtest suites, and
the merge base's run decides new vs pre-existing.

Behind --run-slow: the first build of the test binaries on a machine compiles ~430 files (about
20 minutes on 2 shared cores); warm, one changed .cpp costs the figures in docs/NATIVE.md. The
always-on part is tests/native/test_cxx_units.py (a real gtest binary in the sandbox)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.pipeline import native
from tests.native.test_native_triage import OP_ADD, REAL_ADD, failure, second

pytestmark = [pytest.mark.executorch, pytest.mark.slow, pytest.mark.timeout(3600)]


@pytest.fixture(scope="module", autouse=True)
def googletest():
    if not (native.GOOGLETEST[1] / "CMakeLists.txt").is_file():
        pytest.skip("needs Debian's libgtest-dev and libgmock-dev (scripts/system-deps.sh)")


def triage(source_repo, native_data, head):
    proc = subprocess.run([sys.executable, "-m", "etriage.cli", "triage", "--repo", str(source_repo.path),
                           "--base", "main", "--head", head, "--suite", "cxx_tests", "--target", "host-native",
                           "--data-dir", str(native_data), "--format", "json", "--no-cache"],
                          capture_output=True, text=True, timeout=3500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout), proc.stderr


def test_the_op_add_sign_bug_fails_its_cxx_test_as_new_at_the_assertion(source_repo, native_data):
    head = source_repo.branch("add-sign", {OP_ADD: second(REAL_ADD, "return val_a - val_alpha * val_b;")})
    data, log = triage(source_repo, native_data, head)

    assert data["plan"]["recipes"] == ["portable", "cxx_tests"], data["plan"]
    assert data["build"]["status"] == "ok", data["build"]["reason"]
    new = [r for r in data["results"] if r["verdict"] == "new"]
    assert new, (data["summary"], log[-3000:])
    assert {(r["suite"], r["target"], r["base"]) for r in new} == {("cxx_tests", "host-native", "passed")}
    assert all(r["test"].startswith("portable_kernels_test::OpAdd") for r in new), [r["test"] for r in new]
    assert new[0]["suspects"][0]["path"] == OP_ADD
    lines = [failure(r)["line"] for r in new]
    assert all(re.match(r"^kernels/\S+_test\.cpp:\d+: Failure$", line) for line in lines), lines
    [suite] = [s for s in data["suites"] if s["suite"] == "cxx_tests"]
    assert suite["status"] == "ran" and not [t for t in suite["tests"] if "OpAddmm" in t["test"]]


def test_a_comment_only_change_runs_the_cxx_test_green(source_repo, native_data):
    head = source_repo.branch("add-comment", {OP_ADD: lambda t: t.replace(" * All rights reserved.",
                                                                          " * All rights reserved. (etriage)", 1)})
    data, _ = triage(source_repo, native_data, head)

    assert data["build"]["status"] == "ok" and "cxx_tests (host)" in data["build"]["reason"]
    assert data["summary"]["new"] == 0
    [suite] = [s for s in data["suites"] if s["suite"] == "cxx_tests"]
    assert suite["status"] == "ran" and suite["tests"]
    assert all(t["outcome"] == "passed" and t["test"].startswith("portable_kernels_test::OpAdd")
               for t in suite["tests"])
    assert Path(native_data).is_dir()
