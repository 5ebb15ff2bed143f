"""Lowering to QNN's HTP backend and running the result on x86, for the probes and the check.

Import this only where QNN_SDK_ROOT is set: importing executorch.backends.qualcomm without it
makes the package try to download the SDK. `require_sdk()` refuses first, as an environment
error (the probe runner reports it as a skip, never as the change's failure).
"""
from __future__ import annotations

import contextlib
import ctypes
import importlib
import os
import re
import sys
import tempfile
from typing import Any

from tasks.probes.records import ProbeEnvironmentError

SOC = "SM8650"  # Snapdragon 8 Gen 3: HTP v75, what the measured facts were taken on
_ET_LOG_ERROR = re.compile(r"^E \d\d:\d\d:\d\d\.\d+ executorch:")  # ET_LOG(Error, ...) of the delegate


def require_sdk() -> str:
    root = os.environ.get("QNN_SDK_ROOT", "")
    if not root or not os.path.isdir(root):
        raise ProbeEnvironmentError("QNN SDK unavailable (QNN_SDK_ROOT is not set for this run)")
    return root


def _qualcomm(module: str):
    require_sdk()
    return importlib.import_module(f"executorch.backends.qualcomm.{module}")


def compiler_specs(use_fp16: bool = True) -> list[Any]:
    utils = _qualcomm("utils.utils")
    chipset = _qualcomm("serialization.qc_schema").QcomChipset
    backend = utils.generate_htp_compiler_spec(use_fp16=use_fp16)
    return utils.generate_qnn_executorch_compiler_spec(soc_model=getattr(chipset, SOC), backend_options=backend)


def lower(module, inputs, *, use_fp16: bool = True, skip_mutable_buffer: bool = False):
    """`module` (or {method: module}) lowered to QNN HTP: the EdgeProgramManager."""
    utils = _qualcomm("utils.utils")
    if isinstance(module, dict):
        specs = {name: compiler_specs(use_fp16) for name in module}
    else:
        specs = compiler_specs(use_fp16)
    return utils.to_edge_transform_and_lower_to_qnn(module, inputs, specs, skip_mutable_buffer=skip_mutable_buffer)


def quantizer(per_channel: bool = False):
    """QNN's own quantizer (8-bit activations and weights) for the pt2e flow."""
    module = _qualcomm("quantizer.quantizer")
    chipset = _qualcomm("serialization.qc_schema").QcomChipset
    q = module.QnnQuantizer(soc_model=getattr(chipset, SOC))
    q.set_default_quant_config(module.QuantDtype.use_8a8w, is_qat=False, is_conv_per_channel=per_channel,
                               is_linear_per_channel=per_channel)
    return q


def delegate_ids(program) -> list[str]:
    """The backend ids of every delegate in an emitted program's methods."""
    return [d.id for plan in program.executorch_program.execution_plan for d in plan.delegates]


class NativeLog:
    """What QNN's C++ side printed while a block ran: its error lines (`<E>`, `ERROR`), bounded."""

    MAX_LINES = 20
    MAX_CHARS = 300

    def __init__(self):
        self.errors: list[str] = []

    @property
    def primary(self) -> str:
        """The most specific line: an HTP op's own (`concat.cc:338::ERROR:...`) before the
        delegate's summary of it (`<E> Graph forward failed ...`)."""
        ops = [line for line in self.errors if "::ERROR:" in line]
        return (ops or self.errors or ["no QNN error line"])[0]

    def read(self, text: str) -> None:
        for line in text.splitlines():
            line = " ".join(line.split())
            if native_error(line) and line not in self.errors and len(self.errors) < self.MAX_LINES:
                self.errors.append(line[:self.MAX_CHARS])


def native_error(line: str) -> bool:
    """Whether a line QNN or the delegate printed is an error: QNN's `<E>` and `[ERROR]` lines,
    an HTP op's `::ERROR:`, and the runtime's `E 00:00:06.278490 executorch:File.cpp:149] ...`."""
    return "<E>" in line or "ERROR" in line or bool(_ET_LOG_ERROR.match(line.strip()))


@contextlib.contextmanager
def native_log():
    """Capture file descriptors 1 and 2 while the block runs (QNN logs from C++, past Python's
    sys.stdout); afterwards the text goes on to stderr and its error lines are in `.errors`."""
    log = NativeLog()
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield log
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            ctypes.CDLL(None).fflush(None)  # the simulator printf()s: C's buffer, not Python's
            for fd, copy in zip((1, 2), saved):
                os.dup2(copy, fd)
                os.close(copy)
            sink.seek(0)
            text = sink.read().decode(errors="replace")
            sys.stderr.write(text)
            log.read(text)
