"""Native changes triaged for real, through `etriage triage`, on ExecuTorch v1.4.1's sources:
the change's C++ is rebuilt (portable recipe: runtime, portable kernels, executor_runner) in
the sandbox with the shared compiler cache, and the rebuilt runner runs the probes' programs
made by the change's Python (target host-native), compared with eager step by step."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

# a cold machine builds ExecuTorch once inside the first of these tests: its portable kernels trimmed to
# the probes' (tests/native/conftest.py), 64 s on an idle machine; with --run-slow the whole tree, 155 s
pytestmark = [pytest.mark.executorch, pytest.mark.timeout(2400)]

OP_ADD = "kernels/portable/cpu/op_add.cpp"
REAL_ADD = "return val_a + val_alpha * val_b;"


def triage(source_repo, native_data, head, *extra):
    """--no-cache: no artifacts of an earlier session answer; the build folder and the compiler
    cache (which are not results) stay warm. The base is `source_repo.short` (conftest.py); a
    later --base wins (argparse)."""
    proc = subprocess.run([sys.executable, "-m", "etriage.cli", "triage", "--repo", str(source_repo.path),
                           "--base", source_repo.short, "--head", head, "--suite", "probes", "--target", "host-native",
                           "--data-dir", str(native_data), "--format", "json", "--no-cache", *extra],
                          capture_output=True, text=True, timeout=3000)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout), proc.stderr


def failure(verdict: dict) -> dict:
    """The verdict's engine failure (the JSON holds it whole)."""
    return verdict.get("failure") or {"line": verdict.get("primary_line", ""), "category": verdict.get("category")}


def second(old: str, new: str):
    """Replace the second occurrence (add_out's real-number branch; the first is complex)."""
    def edit(text: str) -> str:
        first = text.index(old)
        at = text.index(old, first + 1)
        return text[:at] + new + text[at + len(old):]
    return edit


def test_a_bug_in_a_portable_kernel_is_a_new_probe_failure_at_that_cpp(source_repo, native_data):
    head = source_repo.branch("add-sign", {OP_ADD: second(REAL_ADD, "return val_a - val_alpha * val_b;")},
                              start=source_repo.short)
    data, log = triage(source_repo, native_data, head)

    assert data["plan"]["recipes"] == ["portable"], data["plan"]
    reason = data["build"]["reason"]
    assert data["build"]["status"] == "ok" and f"portable (host) at {head[:12]}: ok (" in reason, reason
    new = [r for r in data["results"] if r["verdict"] == "new"]
    assert new, (data["summary"], log[-3000:])
    assert {r["target"] for r in new} == {"host-native"}
    assert all(r["suite"] == "probes" and r["base"] == "passed" for r in new)
    for r in new:
        assert r["suspects"][0]["path"] == OP_ADD
    lines = [failure(r)["line"] for r in new]
    assert any("numerical mismatch with eager" in line for line in lines), lines
    [suite] = [s for s in data["suites"] if s["target"] == "host-native"]
    assert suite["status"] == "ran" and len(suite["tests"]) >= 2


def test_a_change_that_does_not_compile_is_a_build_failure_at_its_line(source_repo, native_data):
    def break_it(text: str) -> str:
        lines = text.splitlines(keepends=True)
        at = next(i for i, line in enumerate(lines) if "ScalarType common_type = promoteTypes" in line)
        lines.insert(at + 1, "  int etriage_broken = etriage_undefined_symbol;\n")
        return "".join(lines)

    head = source_repo.branch("add-broken", {OP_ADD: break_it}, start=source_repo.short)
    line_no = next(i for i, line in enumerate(source_repo_file(source_repo, head, OP_ADD), 1)
                   if "etriage_undefined_symbol" in line)
    data, _ = triage(source_repo, native_data, head)

    assert data["build"]["status"] == "failed"
    [verdict] = data["results"]
    line = failure(verdict)["line"]
    assert (verdict["verdict"], failure(verdict)["category"]) == ("new", "build_failure"), verdict
    assert f"{OP_ADD}:{line_no}:" in line and "etriage_undefined_symbol" in line, line
    assert verdict["suspects"][0]["path"] == OP_ADD
    assert verdict["base"] == "ok"  # the merge base builds: the change broke it


def test_a_build_the_merge_base_breaks_too_is_pre_existing(source_repo, native_data):
    broken = source_repo.branch("base-broken", {OP_ADD: lambda t: t.replace(
        "  // Resize\n", "  // Resize\n  int etriage_base_broken = etriage_missing;\n", 1)}, start=source_repo.short)
    head = source_repo.branch("on-broken", {"kernels/portable/cpu/op_mul.cpp": lambda t: t.replace(
        " * All rights reserved.", " * All rights reserved. (etriage)", 1)}, start=broken)
    data, _ = triage(source_repo, native_data, head, "--base", broken)

    [verdict] = data["results"]
    assert (verdict["verdict"], failure(verdict)["category"]) == ("pre_existing", "build_failure"), verdict
    assert verdict["base"] == "failed" and f"{OP_ADD}:" in failure(verdict)["line"]


def test_a_comment_only_change_rebuilds_from_the_compiler_cache_and_finds_nothing(source_repo, native_data):
    # same line count: the preprocessed source is identical, so the compiler cache answers
    head = source_repo.branch("add-comment", {OP_ADD: lambda t: t.replace(" * All rights reserved.",
                                                                          " * All rights reserved. (etriage)", 1)},
                              start=source_repo.short)
    data, _ = triage(source_repo, native_data, head)

    assert data["build"]["status"] == "ok"
    reason = data["build"]["reason"]
    # every object the build compiled came from the compiler cache (one .cpp's, or its dependants')
    hits = re.search(r"compiler cache (\d+)/(\d+) hits", reason)
    assert hits and hits.group(1) == hits.group(2) and int(hits.group(1)) >= 1, reason
    assert data["summary"]["new"] == 0 and not [r for r in data["results"] if r["verdict"] == "new"]
    [suite] = [s for s in data["suites"] if s["target"] == "host-native"]
    assert suite["status"] == "ran" and all(t["outcome"] == "passed" for t in suite["tests"]) and suite["tests"]


def test_a_python_only_change_builds_nothing_native(source_repo, native_data):
    head = source_repo.branch("py-only", {"exir/memory.py": lambda t: t + "\n# touched\n"}, start=source_repo.short)
    data, _ = triage(source_repo, native_data, head)

    assert data["plan"]["recipes"] == ["overlay"]
    # each side is its commit's whole tree on the wheel's compiled parts; nothing native is built
    assert data["build"]["kind"] == "environment" and "portable" not in data["build"]["reason"]
    assert data["build"]["environment"]["compiled"] == "wheel"
    [suite] = [s for s in data["suites"] if s["target"] == "host-native"]
    assert suite["status"] == "not_run" and "no executor_runner was rebuilt" in suite["reason"]


def source_repo_file(source_repo, commit, path):
    proc = subprocess.run(["git", "-C", str(source_repo.path), "show", f"{commit}:{path}"],
                          capture_output=True, text=True, check=True)
    return proc.stdout.splitlines()
