"""Is a commit's environment healthy? The package imports from the laid tree, its compiled parts
load, the torch that runs is the pinned one, and a small real program goes through export,
lowering (XNNPACK), emission and the runtime, matching eager: the probes' path in miniature.

Run in the sandbox (the commit's code runs). The answer is kept beside the laid tree, keyed by
what else the run sees (torch), so a merge base shared by many PRs is checked once.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from tasks.pipeline.sandbox import Sandbox, run_logged, scrubbed_env

CHECK = r"""
import json, sys
root = sys.argv[1]
out = {}
import torch
out["torch"] = torch.__version__
import executorch.exir as exir
out["exir"] = exir.__file__
from executorch.extension.pybindings import portable_lib
out["portable_lib"] = portable_lib.__file__
from executorch.exir import to_edge_transform_and_lower
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval()
example = (torch.randn(2, 4),)
program = to_edge_transform_and_lower(torch.export.export(model, example),
                                      partitioner=[XnnpackPartitioner()]).to_executorch()
method = portable_lib._load_for_executorch_from_buffer(program.buffer)
got = method.forward(example)[0]
out["max_abs_error"] = float((got - model(*example)).abs().max())
print("HEALTH=" + json.dumps(out))
"""


@dataclass
class Health:
    healthy: bool
    detail: str  # what the check found, or its last error line
    torch: str = ""
    cached: bool = False


def check(root: Path, package_dir: Path, pythonpath: list[str], readable: list[Path], *, python: str,
          sandbox: Sandbox, work_dir: Path, expected_torch: str, timeout: float = 600) -> Health:
    key = hashlib.sha256(json.dumps([pythonpath, python, expected_torch]).encode()).hexdigest()[:12]
    cache = root / f"health-{key}.json"
    try:
        data = json.loads(cache.read_text())
        return Health(data["healthy"], data["detail"], data.get("torch", ""), cached=True)
    except (OSError, ValueError, KeyError):
        pass
    work_dir.mkdir(parents=True, exist_ok=True)
    env = scrubbed_env(work_dir, sandbox=sandbox, python=python, pythonpath=[str(root), *pythonpath])
    done = run_logged([python, "-c", CHECK, str(root)], cwd=work_dir, env=env,
                      log_path=work_dir / f"health-{root.name}.log", timeout=timeout, sandbox=sandbox,
                      python=python, readable=[root, *readable, work_dir])
    text = done.tail(20000)
    found = [line[7:] for line in text.splitlines() if line.startswith("HEALTH=")]
    health = _judge(found, text, done, root, expected_torch)
    if done.limit:  # a limit of this machine says nothing lasting about the environment
        return health
    tmp = cache.with_suffix(".tmp")
    tmp.write_text(json.dumps({"healthy": health.healthy, "detail": health.detail, "torch": health.torch}))
    tmp.replace(cache)
    return health


def _judge(found: list[str], text: str, done, root: Path, expected_torch: str) -> Health:
    if done.returncode != 0 or not found:
        lines = [line for line in text.splitlines() if line.strip() and not line.startswith("$ ")]
        last = lines[-1].strip() if lines else f"exit code {done.returncode}"
        why = f" (the sandbox's {done.limit})" if done.limit else ""
        return Health(False, f"the package does not import and run here{why}: {last[:400]}")
    data = json.loads(found[-1])
    if not str(data.get("exir", "")).startswith(str(root)):
        return Health(False, f"executorch.exir resolves to {data.get('exir')}, not into the laid tree")
    torch = data.get("torch", "")
    if expected_torch and torch.split("+", 1)[0] != expected_torch.split("+", 1)[0]:
        return Health(False, f"torch {torch} runs, not the pinned {expected_torch}", torch)
    if data.get("max_abs_error", 1.0) > 1e-4:
        return Health(False, f"a Linear+ReLU program lowered to XNNPACK differs from eager by "
                             f"{data['max_abs_error']:.3g}", torch)
    return Health(True, f"imports, loads the pybindings, runs a program lowered to XNNPACK "
                        f"(torch {torch})", torch)
