"""On the pristine installed executorch every probe passes, and the outputs are well formed."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.executorch

EXPECTED = {
    ("multi_method", "per_method_partitioners"),
    ("multi_method", "two_methods_different_backends"),
    ("multi_method", "shared_nodes_across_delegates"),
    ("multi_method", "kv_cache_methods_through_passes"),
    ("mutable_buffer", "kv_cache_fp"),
    ("mutable_buffer", "kv_cache_quantized"),
    ("mutable_buffer", "kv_cache_through_passes"),
}
# probe -> its source file, where that is not the suite's own module
MODULE = {"kv_cache_methods_through_passes": "tasks/probes/multi_method_passes.py"}


def test_all_probes_pass_and_exit_zero(pristine_run):
    proc, _ = pristine_run
    results = json.loads(proc.stdout)["results"]
    assert {(r["suite"], r["name"]) for r in results} == EXPECTED
    bad = [f"{r['name']}: {r['outcome']}\n{r['diagnosis']}" for r in results if r["outcome"] != "passed"]
    assert not bad, "\n".join(bad)
    assert proc.returncode == 0


def test_junit_names_every_probe(pristine_run):
    _, suite = pristine_run
    assert suite.tag == "testsuite" and suite.get("name") == "etriage.probes"
    assert suite.get("tests") == str(len(EXPECTED)) and suite.get("failures") == "0" and suite.get("errors") == "0"
    cases = {(c.get("classname"), c.get("name"), c.get("file")) for c in suite.iter("testcase")}
    assert cases == {(f"probes.{s}", n, MODULE.get(n, f"tasks/probes/{s}.py")) for s, n in EXPECTED}
    assert not any(len(c) for c in suite.iter("testcase")), "a pristine probe reported a failure/error/skip"


def test_json_results_carry_evidence(pristine_run):
    proc, _ = pristine_run
    results = {r["name"]: r for r in json.loads(proc.stdout)["results"]}
    rope = results["shared_nodes_across_delegates"]["details"]["delegates"]
    assert [d["backend_id"] for d in rope["prefill"]] == ["XnnpackBackend", "XnnpackBackend"]
    assert results["per_method_partitioners"]["details"]["delegates"]["decode"] == []
    assert results["kv_cache_quantized"]["details"]["buffer_mutations"] == {"fp": 2, "quantized": 2}
    assert len(results["kv_cache_fp"]["details"]["max_abs_error_per_step"]) == 3
    methods = results["kv_cache_methods_through_passes"]["details"]
    assert methods["delegates"]["decode"] == []
    assert methods["delegates"]["prefill"] and set(methods["delegates"]["prefill"]) == {"XnnpackBackend"}
    assert {m: len(e) for m, e in methods["max_abs_error_per_call"].items()} == {"prefill": 3, "decode": 3}


def test_etriage_probe_subcommand_runs_in_process():
    """`etriage probe` through the real dispatcher; one lowering-only probe keeps it quick."""
    proc = subprocess.run(
        [sys.executable, "-m", "etriage.cli", "probe", "--suite", "multi_method",
         "--probe", "two_methods_different_backends", "--format", "text"],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "PASSED   multi_method/two_methods_different_backends" in proc.stdout
    assert proc.stdout.strip().endswith("1 passed, 0 failed, 0 error, 0 skipped")


def test_unknown_probe_is_a_one_line_error():
    proc = subprocess.run(
        [sys.executable, "-m", "tasks.probes", "--probe", "no_such_probe"],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if "no_such_probe" in line]
    assert lines == ["etriage probe: unknown probe(s): no_such_probe"]
    assert "Traceback" not in proc.stderr
