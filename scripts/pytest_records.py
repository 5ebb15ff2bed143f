"""Real training records from ExecuTorch's own tests on real broken lowering: each regression
patch (tests/engine/corpus/regressions/, tasks/probes/regressions/) is applied to an overlay
of the installed ExecuTorch, ExecuTorch's own tests of the area the patch breaks run on it
with pytest, and every test that fails there but passes on the unpatched package becomes a
corpus record of what pytest printed (a CI log's text, and the bot's own run's), with its
provenance: the patch, the test, the ExecuTorch version, the file the patch touched.

    .venv/bin/python scripts/pytest_records.py [--patch NAME ...] [--out tests/engine/corpus/generated/tests_on_patched_executorch.jsonl]

Records are appended to --out, replacing that file's earlier records of the same patches.
Their sources are the patched ExecuTorch files, never an issue or pull request of the
evaluation split, so `etriage eval` keeps measuring on threads the model never learnt from.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import mutant_records  # noqa: E402
from regression_records import PATCH_DIRS, expected_category, overlay_for, touched  # noqa: E402
from tasks.pipeline import overlay  # noqa: E402
from triage_rules.corpus import load_corpus  # noqa: E402
from triage_rules.roots import shape  # noqa: E402

# ExecuTorch's own tests of each area (package-relative file, -k expression): what a CI job
# runs when a change touches that area.
AREA_TESTS = {
    "multi_method_lowering": [
        ("exir/backend/test/test_to_backend_multi_method.py", ""),
        ("exir/backend/test/test_partitioner.py", ""),
        ("exir/backend/test/test_backends_lifted.py", "partition or delegate or buffer"),
    ],
    "mutable_buffer": [
        ("exir/tests/test_passes.py", "mutable or constant_prop or write_back or buffer"),
        ("exir/tests/test_memory_planning.py", "mutable or buffer or kv or multi_state"),
        ("exir/emit/test/test_emit.py", "mutable or buffer"),
        ("exir/backend/test/test_partitioner.py", "buffer or mutable"),
    ],
}
OUT = REPO / "tests" / "engine" / "corpus" / "generated" / "tests_on_patched_executorch.jsonl"
MAX_LINES = 38  # an excerpt is 2 to 40 lines (the corpus's rule)
PER_PATCH = 8  # at most this many records of one patch, each a different message shape
_EXCEPTION_LINE = re.compile(r"^E\s+(?:[\w.]+\.)?\w*(?:Error|Exception|Violation\w*)\b|^E\s+\w+Error:")


def run_tests(package_parent: Path, category: str, scratch: Path) -> dict[str, str]:
    """test id -> pytest's failure text, for the area's tests run against `package_parent`."""
    failed: dict[str, str] = {}
    for index, (path, keyword) in enumerate(AREA_TESTS[category]):
        junit = scratch / f"junit-{index}.xml"
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
        env["PYTHONPATH"] = str(package_parent)
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=short",
                   f"--rootdir={scratch}", f"--junit-xml={junit}", str(package_parent / "executorch" / path)]
        subprocess.run(command + (["-k", keyword] if keyword else []), cwd=scratch, env=env,
                       capture_output=True, text=True, timeout=1800, check=False)
        if not junit.exists():
            continue
        for case in ET.parse(junit).iter("testcase"):
            problem = case.find("failure")
            if problem is None:
                problem = case.find("error")
            if problem is not None:
                failed[f"{path}::{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"] = problem.text or ""
    return failed


def general(line: str, installed: Path, scratch: Path) -> str:
    """A line as ExecuTorch's CI prints it (mutant_records.general), the overlay's copy of the
    package read as the package."""
    for package in (str(scratch / "overlay" / "executorch") + "/", "overlay/executorch/"):
        line = line.replace(package, "")
    return mutant_records.general(line, installed)


def excerpt_of(test: str, text: str, installed: Path, scratch: Path) -> tuple[str, str] | None:
    """(excerpt, failure line) as a CI log shows a failed test: the tail of pytest's short
    traceback and its summary line, with this machine's paths made general."""
    lines = [general(line.rstrip(), installed, scratch) for line in text.splitlines() if line.strip()]
    exception = next((line for line in lines if _EXCEPTION_LINE.match(line)), None)
    if exception is None:
        return None
    summary = f"FAILED {test} - {exception[1:].strip()}"[:200]
    body = lines[-(MAX_LINES - 1):]
    return "\n".join([*body, summary]), exception


def records_of(patch: Path, version: str, baseline: dict[str, set[str]]) -> list[dict]:
    category = expected_category(patch)
    installed = overlay.installed_package_dir(sys.executable)
    if category not in baseline:
        with tempfile.TemporaryDirectory(prefix="etriage-pytest-base-") as scratch:
            baseline[category] = set(run_tests(installed.parent, category, Path(scratch)))
    out, shapes = [], set()
    with tempfile.TemporaryDirectory(prefix="etriage-pytest-") as scratch:
        root = overlay_for(patch, Path(scratch))
        failed = run_tests(root, category, Path(scratch))
        for test, text in sorted(failed.items()):
            made = excerpt_of(test, text, installed, Path(scratch))
            if test in baseline[category] or made is None:
                continue  # fails without the patch too, or no exception line to learn from
            excerpt, line = made
            if shape(line) in shapes or len(out) >= PER_PATCH:
                continue  # a near-duplicate: the same message with other names
            shapes.add(shape(line))
            out.append({
                "id": f"gen-pytest-{patch.stem}-{test.rsplit('::', 1)[-1]}"[:120],
                "source": f"https://github.com/pytorch/executorch/blob/v{version}/{touched(patch)[0]}",
                "origin": "generated: ExecuTorch's own tests on a patched ExecuTorch",
                "excerpt": excerpt, "failure_line": line, "category": category,
                "note": (f"scripts/pytest_records.py: {patch.relative_to(REPO)} applied to the installed executorch "
                         f"{version}; {test} failed so (it passes unpatched)"),
            })
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patch", action="append", help="patch name (default: every patch)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    version = metadata.version("executorch")
    every = {p.stem: p for folder in PATCH_DIRS for p in sorted(folder.glob("*.patch"))}
    names = args.patch or [n for n in every if expected_category(every[n]) in AREA_TESTS]
    baseline: dict[str, set[str]] = {}
    kept = [json.loads(line) for line in (args.out.read_text().splitlines() if args.out.exists() else []) if line]
    prefixes = tuple(f"gen-pytest-{name}-" for name in names)
    records = [r for r in kept if not r["id"].startswith(prefixes)]
    for name in names:
        made = records_of(every[name], version, baseline)
        print(f"{name}: {len(made)} record(s)", flush=True)
        records += made
    args.out.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    load_corpus(args.out)  # the corpus loader's checks hold
    print(f"{len(records)} record(s) in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
