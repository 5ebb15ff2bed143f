"""`python -m tasks.qnn.check`: does this QNN_SDK_ROOT lower to HTP and run on x86?

A 2-input `relu(x + y) * 2` model lowered with the fp16 HTP compiler spec for SM8650, emitted,
loaded by the ExecuTorch runtime and run against eager. It exercises the HTP device config that
ExecuTorch 1.4.1 always sends (the `socModel` custom config), so a QAIRT release with the other
`QnnHtpDevice_CustomConfig_t` layout fails here with error 14001. Prints one JSON line:
{"layout": "ok" | "mismatch" | "failed", "lower_seconds", "run_seconds", "max_abs_diff", "error"}.
"""
from __future__ import annotations

import json
import sys
import time

import torch

from tasks.probes.runtime import LoadedProgram, to_pte
from tasks.qnn import htp
from tasks.qnn.sdk import MISMATCH


class AddRelu(torch.nn.Module):
    def forward(self, x, y):
        return (x + y).relu() * 2


def main() -> int:
    result: dict = {"layout": "failed"}
    try:
        inputs = (torch.randn(1, 8, 16, generator=torch.Generator().manual_seed(0)),
                  torch.randn(1, 8, 16, generator=torch.Generator().manual_seed(1)))
        start = time.monotonic()
        program, pte = to_pte(htp.lower(AddRelu().eval(), inputs))
        result["lower_seconds"] = round(time.monotonic() - start, 2)
        result["pte_bytes"] = len(pte)
        result["delegates"] = htp.delegate_ids(program)
        start = time.monotonic()
        (out,) = LoadedProgram(pte).run("forward", inputs)
        result["run_seconds"] = round(time.monotonic() - start, 3)
        diff = float((out - AddRelu()(*inputs)).abs().max())
        result["max_abs_diff"] = diff
        if result["delegates"] != ["QnnBackend"]:
            result["error"] = f"expected one QnnBackend delegate, got {result['delegates']}"
        elif diff > 1e-2:
            result["error"] = f"HTP output differs from eager by {diff}"
        else:
            result["layout"] = "ok"
    except Exception as exc:  # the check's verdict is its output: every failure is reported
        text = f"{type(exc).__name__}: {exc}"
        result["error"] = text.splitlines()[0][:500]
        if any(words in text for words in MISMATCH):
            result["layout"] = "mismatch"
    print(json.dumps(result), flush=True)
    return 0 if result["layout"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
