"""Wall time of a full `triage(...)`: cold (no caches) and with the merge base cached.

Builds a throwaway git repository from the installed executorch package, applies a real
regression patch as head, and triages it twice with the default plan (every suite the
plan picks for the change). Prints the numbers; asserts nothing about speed.

    .venv/bin/python bench/triage.py [--patch PATH] [--suite NAME ...]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tasks.pipeline.overlay import installed_package_dir  # noqa: E402
from tasks.pipeline.run import TriageOptions, triage  # noqa: E402

GIT_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "GIT_AUTHOR_NAME": "bench",
           "GIT_AUTHOR_EMAIL": "b@example.com", "GIT_COMMITTER_NAME": "bench",
           "GIT_COMMITTER_EMAIL": "b@example.com"}
SUFFIXES = (".py", ".yaml", ".fbs", ".pyi", ".h")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env=GIT_ENV).stdout.strip()


def make_repo(root: Path, patch: Path) -> Path:
    installed = installed_package_dir(sys.executable)
    repo = root / "executorch"
    for src in installed.rglob("*"):
        rel = src.relative_to(installed)
        if src.is_file() and src.suffix in SUFFIXES and "__pycache__" not in rel.parts and rel.parts[0] != "data":
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_bytes(src.read_bytes())
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    git(repo, "checkout", "-qb", "change")
    git(repo, "apply", str(patch))
    git(repo, "commit", "-qam", patch.stem)
    return repo


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patch", type=Path,
                        default=ROOT / "tasks/probes/regressions/multi_method_first_partitioner_for_all.patch")
    parser.add_argument("--suite", action="append", dest="suites")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="etriage-bench-") as tmp:
        repo = make_repo(Path(tmp), args.patch)
        data_dir = Path(tmp) / "data"
        for label in ("cold", "base cached"):
            start = time.monotonic()
            report = triage(TriageOptions(repo=repo, base="main", head="change", data_dir=data_dir,
                                          suites=args.suites),
                            progress=lambda m: print(f"  {m}", file=sys.stderr))
            took = time.monotonic() - start
            print(f"triage {label:12s}: {took:6.1f} s  suites={','.join(report.plan.suites)}  "
                  f"summary={report.summary}  base_cached={report.base_cached}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
