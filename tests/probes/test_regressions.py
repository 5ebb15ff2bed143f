"""The probes catch real regressions: each seed breakage, patched into an overlay of the
installed executorch, makes the right probe fail with the right category and diagnosis."""
from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass

import pytest

from tasks.pipeline.overlay import module_name
from tasks.qnn import sdk
from tests.probes.conftest import (REGRESSIONS, installed_package, overlay_env, overlay_misses,
                                   regression_overlay, touched_files)

pytestmark = pytest.mark.executorch


@dataclass(frozen=True)
class Case:
    patch: str
    suite: str  # the --suite the probes run in ("all" to hold probes of both suites)
    failing: dict[str, list[str]]  # probe -> substrings its failure message must hold
    passing: tuple[str, ...] = ()
    qnn: bool = False  # lowered to HTP and run on the x86 simulator: needs the QNN SDK (make install)


def qnn_sdk():
    return sdk.find_sdk({}, sdk.default_root(sys.prefix))[0]


CASES = [
    Case(
        "mutable_buffer_quantizer_freezes_kv_cache",
        "mutable_buffer",
        {
            "kv_cache_quantized": [
                "ProbeFailure: [mutable_buffer] quantized flow lost the mutable KV cache",
                "FP: b_k_cache BUFFER -> BUFFER_MUTATION(index_put)",
                "k_cache missing from inputs",
                "index_put reads b__frozen_param",
                "BUFFER_MUTATION outputs: 2 -> 0",
            ]
        },
        passing=("kv_cache_fp",),
    ),
    Case(
        "mutable_buffer_no_write_back",
        "mutable_buffer",
        {
            "kv_cache_fp": ["ProbeFailure: [mutable_buffer] FP flow:", "nothing writes back into b_k_cache"],
            "kv_cache_quantized": ["ProbeFailure: [mutable_buffer]", "nothing writes back into b_v_cache"],
        },
    ),
    Case(
        "mutable_buffer_constant_prop_folds_cache",
        "mutable_buffer",
        {
            "kv_cache_through_passes": [
                "ProbeFailure: [mutable_buffer]",
                "constant_prop_pass folded 1 read(s) of the mutated buffer k_cache",
                "output differs from eager",
            ]
        },
        passing=("kv_cache_fp",),
    ),
    Case(
        "multi_method_first_partitioner_for_all",
        "multi_method",
        {
            "per_method_partitioners": [
                "ProbeFailure: [multi_method_lowering]",
                "partitioner map routed wrongly: method 'decode' was given NoDelegationPartitioner",
                "['XnnpackBackend']",
            ],
            "two_methods_different_backends": [
                "ProbeFailure: [multi_method_lowering]",
                "method 'all_first'",
            ],
            "kv_cache_methods_through_passes": [
                "ProbeFailure: [multi_method_lowering] prefill (XNNPACK) + decode (portable) sharing a KV cache: "
                "after delegate lowering: method 'decode': partitioner map routed wrongly: expected delegates none "
                "(portable), got ['XnnpackBackend'",
            ],
        },
        passing=("shared_nodes_across_delegates",),
    ),
    Case(
        "multi_method_getitem_order",
        "multi_method",
        {
            "shared_nodes_across_delegates": [
                "ProbeFailure: [multi_method_lowering] shared nodes across delegates: prefill: getitem",
                "[XnnpackBackend]",
                "delegate outputs and getitem indices disagree",
            ]
        },
        passing=("per_method_partitioners", "two_methods_different_backends"),
    ),
    Case(
        "multi_method_shared_cache_split",
        "all",  # no other probe, of either suite, may notice
        {
            "kv_cache_methods_through_passes": [
                "ProbeFailure: [multi_method_lowering] prefill (XNNPACK) + decode (portable) sharing a KV cache: "
                "after to_executorch (memory planning): k_cache is one buffer shared by the methods but is planned "
                "at different places ('decode' at mem_id 2",
                "what one method writes, the other never reads",
                "problem: after to_executorch (memory planning): v_cache is one buffer",
            ]
        },
        passing=("per_method_partitioners", "two_methods_different_backends", "shared_nodes_across_delegates",
                 "kv_cache_fp", "kv_cache_quantized", "kv_cache_through_passes"),
    ),
    Case(
        "qnn_full_ignores_layout_transform",  # upstream 0ed5508a77 (PR #19359) reversed
        "qnn_ops",
        {
            "layout_transformed_ops_on_htp": [
                "ProbeFailure: [qnn_op_validation] conv + full/full_like/cat/softmax/mean over channels on QNN HTP: "
                "the lowered graph failed on the HTP simulator: [1] concat.cc:338::ERROR:Oops, tensor 1 has "
                "mismatched dim 2 (indim=4 outdim=6)",
                "runtime: Failed to execute method forward",
                "QNN: [ERROR] [Qnn ExecuTorch]: <E> Graph forward failed in execution with err 1100",
            ]
        },
        qnn=True,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.patch for c in CASES])
def test_patch_applies_to_pristine_package(case, tmp_path):
    """The pipeline reuses these as head commits: they must apply with git apply."""
    patch = REGRESSIONS / f"{case.patch}.patch"
    assert patch.read_text().startswith("# Breaks: "), "first line must say what the patch breaks"
    for name in touched_files(patch):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(installed_package() / name, tmp_path / name)
    proc = subprocess.run(["git", "apply", "--check", str(patch)], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("case", CASES, ids=[c.patch for c in CASES])
def test_probe_catches_regression(case, probe_subprocess, tmp_path):
    qnn = qnn_sdk() if case.qnn else None
    if case.qnn and qnn is None:
        pytest.skip("QNN not provisioned (make install)")
    patch = REGRESSIONS / f"{case.patch}.patch"
    root = regression_overlay(patch, tmp_path)
    modules = [module_name(name) for name in touched_files(patch)]
    assert all(modules) and overlay_misses(root, [*modules, "executorch.exir.backend.backend_api"],
                                           tmp_path / "verify", qnn) == [], "overlay must win"

    probes = [*case.failing, *case.passing]
    args = ["--suite", case.suite] + [arg for p in probes for arg in ("--probe", p)]
    env = overlay_env(root) | (qnn.env() if qnn else {})
    proc, suite = probe_subprocess(args, env, tmp_path, tmp_path / "probes.xml", readable=[qnn.root] if qnn else [])

    assert proc.returncode == 1
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert set(cases) == set(probes)
    for name, needles in case.failing.items():
        failure = cases[name].find("failure")
        assert failure is not None, f"{name} did not fail:\n{proc.stdout}"
        message = failure.get("message")
        assert message.startswith("ProbeFailure: [") and "\n" not in message
        for needle in needles:
            assert needle in failure.text, f"{needle!r} not in diagnosis of {name}:\n{failure.text}"
    for name in case.passing:
        assert len(cases[name]) == 0, f"{name} should be unaffected by {case.patch}:\n{proc.stdout}"


def test_readme_lists_every_patch():
    readme = (REGRESSIONS / "README.md").read_text()
    patches = sorted(p.name for p in REGRESSIONS.glob("*.patch"))
    assert patches == sorted(f"{c.patch}.patch" for c in CASES)
    for name in patches:
        assert f"`{name}`" in readme
