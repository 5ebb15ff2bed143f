"""Real training records from real broken lowering: each regression patch of the probes
(tasks/probes/regressions/) is applied to an overlay of the installed ExecuTorch, the probes
run on it in a subprocess, and every probe that failed with a native exception (a traceback
from ExecuTorch or torch, not etriage's own ProbeFailure text) becomes a corpus record, with
its provenance: the patch, the probe, the ExecuTorch version, the file the patch touched.

    .venv/bin/python scripts/regression_records.py [--patch NAME ...] [--out tests/engine/corpus/generated/probes_on_patched_executorch.jsonl]

The records' sources are ExecuTorch files, never an issue or pull request of the evaluation
split, so `etriage eval` keeps measuring on threads the model never learnt from.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tasks.pipeline import overlay  # noqa: E402
from triage_rules.corpus import load_corpus  # noqa: E402

# The corpus's regressions: broken lowering that makes ExecuTorch itself raise (the default), and
# the probes' own (by --patch NAME: they fail with etriage's ProbeFailure text, so no records).
CORPUS_PATCHES = REPO / "tests" / "engine" / "corpus" / "regressions"
PATCH_DIRS = (CORPUS_PATCHES, REPO / "tasks" / "probes" / "regressions")
OUT = REPO / "tests" / "engine" / "corpus" / "generated" / "probes_on_patched_executorch.jsonl"


def touched(patch: Path) -> list[str]:
    return [line[6:].split("\t")[0].strip() for line in patch.read_text().splitlines() if line.startswith("+++ b/")]


def expected_category(patch: Path) -> str:
    head = patch.read_text().splitlines()[0]
    return head.split("Expect category ", 1)[1].split()[0].strip(".,")


def overlay_for(patch: Path, scratch: Path) -> Path:
    installed = overlay.installed_package_dir(sys.executable)
    patched = scratch / "patched"
    for name in touched(patch):
        (patched / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(installed / name, patched / name)
    subprocess.run(["git", "apply", str(patch)], cwd=patched, check=True, capture_output=True, text=True)
    root = scratch / "overlay"
    overlay.lay_overlay(installed, root, {name: (patched / name).read_bytes() for name in touched(patch)})
    return root


def records_of(patch: Path, version: str) -> list[dict]:
    category = expected_category(patch)
    installed = overlay.installed_package_dir(sys.executable)
    with tempfile.TemporaryDirectory(prefix="etriage-regression-") as scratch:
        root = overlay_for(patch, Path(scratch))
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
        env["PYTHONPATH"] = os.pathsep.join([str(root), str(REPO)])
        suite = "mutable_buffer" if category == "mutable_buffer" else "multi_method"
        done = subprocess.run([sys.executable, "-m", "tasks.probes", "--suite", suite, "--format", "json"], env=env,
                              cwd=scratch,
                              capture_output=True, text=True, timeout=1800, check=False)
    results = json.loads(done.stdout)["results"]
    out = []
    for result in results:
        diagnosis = result.get("diagnosis") or ""
        if result["outcome"] == "passed" or "Traceback (most recent call last)" not in diagnosis:
            continue  # passed, or etriage's own ProbeFailure text: nothing a CI log would show
        # the traceback as Python printed it, with this machine's paths made general
        excerpt = re.sub(r"/tmp/etriage-regression-[^/]+/overlay/", str(installed.parent) + "/",
                         diagnosis.split("\n", 1)[1].strip()).replace(str(REPO), "/etriage")
        failure_line = next(line for line in reversed(excerpt.splitlines()) if line.strip() and not line.startswith(" "))
        out.append({
            "id": f"gen-{patch.stem}-{result['name']}",
            "source": f"https://github.com/pytorch/executorch/blob/v{version}/{touched(patch)[0]}",
            "origin": "generated: real lowering on a patched ExecuTorch",
            "excerpt": excerpt, "failure_line": failure_line, "category": category,
            "note": (f"scripts/regression_records.py: {patch.relative_to(REPO)} applied to the installed "
                     f"executorch {version}; probe {result['suite']}/{result['name']} raised this"),
        })
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patch", action="append", help="patch name (default: every patch)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    version = metadata.version("executorch")
    every = {p.stem: p for folder in PATCH_DIRS for p in sorted(folder.glob("*.patch"))}
    patches = [every[name] for name in args.patch] if args.patch else sorted(CORPUS_PATCHES.glob("*.patch"))
    records = [record for patch in patches for record in records_of(patch, version)]
    args.out.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    load_corpus(args.out)  # the corpus loader's checks hold
    print(f"{len(records)} record(s) from {len(patches)} patch(es) written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
