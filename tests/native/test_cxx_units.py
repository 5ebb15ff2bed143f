"""ExecuTorch's C++ tests (suite cxx_tests): always-on parts without building ExecuTorch.

Which binaries and gtest suites a change's paths select, the engine's primary line of a real
googletest failure (recorded from ExecuTorch's portable_kernels_test with the op_add sign bug),
the planner (the suite and its recipe only with a native change), googletest missing (not run,
with the reason), and a real googletest binary run through the suite in the sandbox."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tasks.pipeline import cxx_tests, native
from tasks.pipeline.plan import plan_change
from tasks.pipeline.sandbox import Sandbox
from tasks.pipeline.suites import SuiteRun
from tasks.pipeline.tables import load_tables
from tasks.pipeline.compare import as_pytest_log
from tasks.records import BuildResult
from tasks.records import TestResult as CaseResult  # not a pytest class
from tests.native.conftest import git
from triage_rules import classify_text
from triage_rules.junit import read_junit

FIXTURES = Path(__file__).with_name("fixtures")
ROWS = cxx_tests.table(SuiteRun(load_tables().suites["cxx_tests"], BuildResult("ok", "none", "0" * 40), "t", Path(".")))


@pytest.mark.parametrize("paths, want", [
    (["kernels/portable/cpu/op_add.cpp"], {"portable_kernels_test": {"OpAdd"}}),
    (["kernels/test/op_add_test.cpp", "kernels/portable/cpu/op_sub.cpp"], {"portable_kernels_test": {"OpAdd", "OpSub"}}),
    (["kernels/portable/cpu/op__to_dim_order_copy.cpp"], {"portable_kernels_test": {"OpToDimOrderCopy"}}),
    (["kernels/portable/cpu/op_add.cpp", "kernels/portable/cpu/scalar_utils.h"], {"portable_kernels_test": None}),
    (["kernels/portable/cpu/util/broadcast_util.cpp"], {"kernels_portable_cpu_util_test": None}),
    (["runtime/core/evalue.cpp"], {"runtime_core_test": None}),
    (["exir/memory.py", "backends/xnnpack/runtime/XNNCompiler.cpp"], {}),
])
def test_the_changed_paths_select_binaries_and_operator_suites(paths, want):
    assert cxx_tests.plan_binaries(paths, ROWS) == want


def test_an_operators_suites_are_its_own_not_a_longer_names():
    listing = ("OpAddOutKernelTest.\n  ByteTensors\nOpAddScalarOutKernelTest.\n  SanityCheck\n"
               "OpAddmmOutTest.\n  OutputDim\nOpSubOutTest.\n  X\n")
    assert cxx_tests.suites_of(listing, {"OpAdd"}) == ["OpAddOutKernelTest", "OpAddScalarOutKernelTest"]


# (recorded googletest XML, its binary, the primary line, the rule)
ENGINE_CASES = [
    # Debian's googletest 1.12, a program shaped like a kernel test (EXPECT_EQ)
    ("gtest-expect-eq.xml", "runtime_core_test", r"^kernels/test/expect_eq_test\.cpp:3: Failure$", "gtest-assertion"),
    # ExecuTorch v1.4.1's portable_kernels_test with the op_add sign bug, OpAdd* suites (kept: 3 of
    # its 45 cases, 3 of a case's failures): EXPECT_TENSOR_EQ's gmock text, paths as ccache gave them
    ("gtest-op_add-sign.xml", "portable_kernels_test", r"^kernels/test/op_add_test\.cpp:\d+: Failure$", "gtest-kernel-test"),
]


@pytest.mark.parametrize("fixture, binary, primary, rule", ENGINE_CASES)
def test_a_recorded_gtest_failure_has_the_assertion_as_its_primary_line(fixture, binary, primary, rule):
    failed = [c for c in read_junit(FIXTURES / fixture) if c.outcome == "failed"]
    assert failed
    for case in failed:
        text = cxx_tests.gtest_text(case.text)
        assert "src/executorch/" not in text
        # as the pipeline gives it to the engine: pytest's form, with the summary line after
        test = CaseResult(suite="cxx_tests", test=f"{binary}::{case.classname}.{case.name}",
                          target="host-native", outcome="failed", message=text.splitlines()[0], text=text)
        [found] = classify_text(as_pytest_log(test), job_name="cxx_tests", failed=True)
        assert re.match(primary, found.line), (found.line, text[:400])
        assert found.rule == rule, found.rule


def test_the_suite_and_its_recipe_are_planned_only_with_a_native_change(tmp_path):
    repo = tmp_path / "repo"
    for rel, text in (("kernels/portable/cpu/op_add.cpp", "int a;\n"), ("exir/memory.py", "X = 1\n")):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    for name, rel in (("cpp", "kernels/portable/cpu/op_add.cpp"), ("py", "exir/memory.py")):
        git(repo, "checkout", "-q", "-B", name, "main")
        (repo / rel).write_text((repo / rel).read_text() + "\n// touched\n# x\n")
        git(repo, "commit", "-q", "-a", "-m", name)
    git(repo, "checkout", "-q", "main")
    tables = load_tables()

    cpp = plan_change(repo, "main", "cpp", tables)
    assert "cxx_tests" in cpp.suites and "cxx_tests" in cpp.recipes and "portable" in cpp.recipes
    py = plan_change(repo, "main", "py", tables)
    assert "cxx_tests" not in py.suites and "cxx_tests" not in py.recipes
    # other suites asked for: the test binaries are not built
    assert plan_change(repo, "main", "cpp", tables, suites=["probes"]).recipes == ["portable"]


def test_without_googletest_the_test_build_is_not_run_with_the_reason(tmp_path):
    src = tmp_path / "executorch"
    (src / "third-party/googletest").mkdir(parents=True)
    reason = native.provide_googletest(src, system=tmp_path / "absent")
    assert "needs googletest" in reason and "libgtest-dev" in reason
    assert native.needs_googletest(load_tables().recipes["cxx_tests"])
    assert not native.needs_googletest(load_tables().recipes["portable"])
    if (native.GOOGLETEST[1] / "CMakeLists.txt").is_file():  # Debian's sources fill the submodule
        assert native.provide_googletest(src) == ""
        assert (src / "third-party/googletest/googletest/include/gtest/gtest.h").is_file()


def test_not_built_means_not_run_with_the_builds_reason(tmp_path):
    build = BuildResult("ok", "overlay+cmake", "a" * 40, reason="cxx_tests (host): not run (needs googletest: x)")
    run = SuiteRun(load_tables().suites["cxx_tests"], build, "host-native", tmp_path,
                   paths=("kernels/portable/cpu/op_add.cpp",))
    result = cxx_tests.run_suite(run, "host-native")
    assert result.status == "not_run" and "needs googletest" in result.reason


GTEST_SOURCE = """
#include <gtest/gtest.h>
TEST(OpAddOutKernelTest, Sign) { int out = 1 - 2; EXPECT_EQ(out, 3); }
TEST(OpAddOutKernelTest, Fine) { EXPECT_TRUE(true); }
TEST(OpAddmmOutTest, Other) { EXPECT_TRUE(false); }
"""


def test_a_real_gtest_binary_runs_in_the_sandbox_filtered_to_the_changed_operator(tmp_path):
    if not shutil.which("g++") or not Path("/usr/include/gtest/gtest.h").is_file() or not shutil.which("bwrap"):
        pytest.skip("needs g++, bubblewrap and Debian's libgtest-dev (scripts/system-deps.sh)")
    built = tmp_path / "built"
    built.mkdir()
    (tmp_path / "t.cpp").write_text(GTEST_SOURCE)
    subprocess.run(["g++", "-O0", str(tmp_path / "t.cpp"), "-o", str(built / "portable_kernels_test"),
                    "-lgtest", "-lgtest_main", "-pthread"], check=True, capture_output=True)
    build = BuildResult("ok", "overlay+cmake", "b" * 40, build_dirs={"cxx_tests": str(built)})
    run = SuiteRun(load_tables().suites["cxx_tests"], build, "host-native", tmp_path / "run",
                   paths=("kernels/portable/cpu/op_add.cpp",), sandbox=Sandbox())
    result = cxx_tests.run_suite(run, "host-native")

    assert result.status == "ran", result.reason
    outcomes = {t.test: t.outcome for t in result.tests}
    assert outcomes == {"portable_kernels_test::OpAddOutKernelTest.Sign": "failed",
                        "portable_kernels_test::OpAddOutKernelTest.Fine": "passed"}  # not OpAddmm
    [failed] = [t for t in result.tests if t.outcome == "failed"]
    assert failed.text.splitlines()[0].endswith(":3: Failure"), failed.text
    assert "Expected equality of these values" in failed.text

    retry = SuiteRun(run.suite, build, "host-native", tmp_path / "run", paths=run.paths, attempt=1,
                     node_ids=("portable_kernels_test::OpAddOutKernelTest.Fine",), sandbox=Sandbox())
    assert [(t.test, t.outcome) for t in cxx_tests.run_suite(retry, "host-native").tests] == [
        ("portable_kernels_test::OpAddOutKernelTest.Fine", "passed")]
