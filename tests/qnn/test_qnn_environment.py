"""The QNN environment: what a worker uses, what provisioning refuses, and the provisioned
libraries really lowering to HTP and running on x86 (tasks/qnn/, docs/QNN.md)."""
from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import pytest

from tasks.pipeline.suites import SuiteRun
from tasks.pipeline.tables import load_tables
from tasks.pipeline.targets import make_target
from tasks.qnn import sdk
from tasks.qnn.htp import NativeLog
from tasks.records import BuildResult

PROVISIONED = sdk.default_root(sys.prefix)
needs_provisioned = pytest.mark.skipif(sdk.find_sdk({}, PROVISIONED)[0] is None,
                                       reason=f"QNN not provisioned at {PROVISIONED} (make install)")


def _record(root: Path, **fields) -> None:
    root.mkdir(parents=True, exist_ok=True)
    record = sdk.QnnRecord(root=str(root), qairt="2.49.40.260810104044", layout="ok", **fields)
    (root / sdk.RECORD).write_text(json.dumps(record.__dict__))


def _libraries(root: Path, leave_out: str = "") -> None:
    (root / sdk.LIB_DIR).mkdir(parents=True, exist_ok=True)
    for name in (*sdk.LIBRARIES, *sdk.RENAMED_LIBCXX):
        if name != leave_out:
            (root / sdk.LIB_DIR / name).write_bytes(b"\x7fELF")


@pytest.mark.parametrize("case, expect", [
    ("nothing provisioned", "nothing is provisioned at"),
    ("check failed", "failed its check: ImportError: no cpuinfo"),
    ("layout mismatch", "failed its check: layout check mismatch"),
    ("library missing", "lacks libHtpPrepare.so"),
    ("given root missing", "QNN_SDK_ROOT=/nonexistent/qnn does not exist"),
    ("provisioned", ""),
    ("given root", ""),
])
def test_which_sdk_a_worker_uses_or_why_none(tmp_path, case, expect):
    root, environ = tmp_path / "qnn-sdk", {}
    if case == "check failed":
        _record(root)
        data = json.loads((root / sdk.RECORD).read_text()) | {"layout": "failed", "check": {"error": "ImportError: no cpuinfo"}}
        (root / sdk.RECORD).write_text(json.dumps(data))
    elif case == "layout mismatch":
        _record(root)
        (root / sdk.RECORD).write_text(json.dumps(json.loads((root / sdk.RECORD).read_text()) | {"layout": "mismatch"}))
    elif case == "library missing":
        _record(root)
        _libraries(root, leave_out="libHtpPrepare.so")
    elif case == "given root missing":
        environ = {"QNN_SDK_ROOT": "/nonexistent/qnn"}
    elif case == "provisioned":
        _record(root)
        _libraries(root)
    elif case == "given root":
        environ = {"QNN_SDK_ROOT": str(tmp_path)}  # a real SDK named by the operator comes first
    found, reason = sdk.find_sdk(environ, root)
    if expect:
        assert found is None and reason.startswith("QNN SDK unavailable (") and expect in reason
    else:
        assert found is not None and reason == ""
        assert found.source == ("QNN_SDK_ROOT" if case == "given root" else "provisioned")
        assert found.env() == {"QNN_SDK_ROOT": str(found.root),
                               "LD_LIBRARY_PATH": str(found.root / "lib/x86_64-linux-clang")}


def test_a_wheel_with_another_sha256_is_refused_and_nothing_is_recorded(tmp_path):
    wheel = tmp_path / sdk.WHEEL
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("onnxruntime_qnn/libQnnHtp.so", b"not the pinned wheel")
    root = tmp_path / "qnn-sdk"
    with pytest.raises(sdk.ProvisionError, match="sha256 .* is not the pinned 6a6a8db1"):
        sdk.provision(root, wheel=wheel, log=lambda m: None)
    assert sdk.read_record(root) is None and sdk.find_sdk({}, root)[0] is None


def test_without_an_sdk_the_target_is_unavailable_and_runs_nothing(tmp_path, monkeypatch):
    """An environment reason, never the change's failure, and nothing imports the qualcomm package."""
    monkeypatch.setattr(sdk, "default_root", lambda prefix=sys.prefix: tmp_path / "absent")
    tables = load_tables()
    target = make_target(tables.targets["qnn-htp-sim"], {})
    ok, reason = target.available()
    assert not ok and reason.startswith("QNN SDK unavailable") and "make install" in reason
    build = BuildResult(status="ok", kind="overlay", commit="0" * 40)
    result = target.run(SuiteRun(tables.suites["qnn_probes"], build, "qnn-htp-sim", tmp_path))
    assert result.status == "not_run" and result.reason == reason and not result.tests
    assert "executorch.backends.qualcomm" not in sys.modules or "QNN_SDK_ROOT" in __import__("os").environ


@needs_provisioned
def test_the_provisioned_record_is_the_pinned_wheel_checked():
    record = sdk.read_record(PROVISIONED)
    assert record.sha256 == sdk.SHA256 and record.qairt.startswith("2.49.40.") and record.layout == "ok"
    assert record.check["delegates"] == ["QnnBackend"] and record.check["max_abs_diff"] < 1e-2
    for name in (*sdk.LIBRARIES, *sdk.RENAMED_LIBCXX):
        assert (PROVISIONED / sdk.LIB_DIR / name).is_file()
    assert sdk.qairt_build_id(PROVISIONED / sdk.LIB_DIR / "libQnnHtp.so") == record.qairt


@needs_provisioned
def test_the_provisioned_libraries_lower_to_htp_and_run_on_x86():
    """A real lowering (fp16, SM8650) and a real run on the x86 HTP simulator, in a fresh
    interpreter given only this SDK: about 10 s."""
    result = sdk.run_check(PROVISIONED)
    assert result["layout"] == "ok", result
    assert result["delegates"] == ["QnnBackend"] and result["pte_bytes"] > 10_000
    assert result["max_abs_diff"] < 1e-2


def test_the_native_log_keeps_qnn_and_delegate_error_lines_once():
    """What the probes quote of QNN's C++ output: `<E>`/`[ERROR]` lines and the delegate's
    ET_LOG errors, each once, whitespace collapsed; info lines are left out."""
    log = NativeLog()
    log.read("[INFO] [Qnn ExecuTorch]: Creating new backend bundle.\n"
             "[ERROR] [Qnn ExecuTorch]:  <E> Failed to parse custom config: 14001\n"
             "[ERROR] [Qnn ExecuTorch]:  <E> Failed to parse custom config: 14001\n"
             "I 00:00:06.200000 executorch:QnnManager.cpp:90] Initialize QnnManager\n"
             "E 00:00:06.278490 executorch:QnnBackendUnifiedRegistry.cpp:149] Fail to configure Qnn device\n")
    assert log.errors == ["[ERROR] [Qnn ExecuTorch]: <E> Failed to parse custom config: 14001",
                          "E 00:00:06.278490 executorch:QnnBackendUnifiedRegistry.cpp:149] Fail to configure Qnn device"]
    assert log.primary == log.errors[0]
