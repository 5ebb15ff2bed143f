"""QNN op probes: ops whose builders must follow QNN's layout transform, lowered to HTP and run.

QNN runs convolutions channel-last: `LayoutTransform` (backends/qualcomm/_passes) gives a conv's
output and the ops after it NHWC tensors and records the permutation in
`node.meta["axis_order"]`, and every builder of those ops must translate its dims and shapes.
A builder that reads the PyTorch (NCHW) shape or axis instead builds a tensor or an axis of the
wrong layout: HTP either refuses the graph at execution (`concat.cc: mismatched dim`) or computes
wrong numbers. Upstream fixed such builders repeatedly (full/full_like #19359, cat #14325,
stack/unbind #16686, amax #13381).

The model: a conv whose channel-last output is concatenated along channels with a `full` and a
`full_like`, then softmax and mean over channels: fp16 on HTP (SM8650), run on the x86 simulator,
against eager. QNN's own error lines of the lowering and the run are part of the diagnosis.
"""
from __future__ import annotations

import torch

from tasks.probes.multi_method import _output_problems
from tasks.probes.records import ProbeFailure
from tasks.probes.runtime import LoadedProgram, require_backends, to_pte

QNN = "QnnBackend"
ATOL = 2e-2  # fp16 on HTP: this model's measured error is below 2e-3
SHAPE = (1, 8, 4, 6)  # H != W != C: a dim taken from the wrong layout cannot line up by chance


class ConvThenLayoutOps(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 16, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)  # NHWC inside the QNN graph
        filled = torch.full((1, 4, 4, 6), 0.5, dtype=y.dtype)
        like = torch.full_like(y, -0.25)
        z = torch.softmax(torch.cat([y, filled, like], dim=1), dim=1)
        # z * z.mean: `softmax(z) * z.mean(...)` (z read twice) crashes the x86 simulator (SIGSEGV)
        return z * z.mean(dim=1, keepdim=True)


def layout_transformed_ops_on_htp() -> dict:
    from tasks.qnn import htp  # deferred: imports executorch.backends.qualcomm, only with QNN_SDK_ROOT set

    htp.require_sdk()
    require_backends(QNN)
    torch.manual_seed(0)
    model, inputs = ConvThenLayoutOps().eval(), (torch.randn(*SHAPE),)
    with torch.no_grad():
        expected = model(*inputs)
    headline = "conv + full/full_like/cat/softmax/mean over channels on QNN HTP"
    with htp.native_log() as log:
        program, pte = to_pte(htp.lower(model, inputs))
    backends = htp.delegate_ids(program)
    data = {"delegates": backends}
    if backends != [QNN]:
        raise ProbeFailure(f"{headline}: lowered to {backends or 'no delegate'}, expected one {QNN} delegate",
                           [f"QNN: {line}" for line in log.errors], data)
    with htp.native_log() as log:
        try:
            got = LoadedProgram(pte).run("forward", inputs)
        except RuntimeError as exc:
            got, failed = None, " ".join(str(exc).split())
    if got is None:
        raise ProbeFailure(f"{headline}: the lowered graph failed on the HTP simulator: {log.primary}",
                           [f"runtime: {failed}", *(f"QNN: {line}" for line in log.errors)], data)
    problems = _output_problems("forward", got, expected, atol=ATOL, rtol=ATOL)
    data["max_abs_error"] = float((got[0] - expected).abs().max()) if got[0].shape == expected.shape else None
    if problems:
        raise ProbeFailure(f"{headline}: {problems[0]} (a builder used the NCHW shape or axis)",
                           [f"problem: {p}" for p in problems] + [f"QNN: {line}" for line in log.errors], data)
    data["pte_bytes"] = len(pte)
    return data


PROBES = [("layout_transformed_ops_on_htp", layout_transformed_ops_on_htp)]
