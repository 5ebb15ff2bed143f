"""What the sandbox costs to start one process: bare vs inside bubblewrap, alternating, N times.

    .venv/bin/python bench/sandbox.py [-n 10]

Three commands: `/bin/true` (bubblewrap's own cost), `python -c pass` (the interpreter), and a
test process as the pipeline starts one (`python -m pytest` on one trivial test, with the
venv's plugins). Prints the median and spread of each; asserts nothing about speed.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tasks.pipeline.sandbox import Sandbox, run_logged, scrubbed_env  # noqa: E402

TEST = "def test_one():\n    assert 1 + 1 == 2\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="etriage-bench-") as tmp:
        tree = Path(tmp) / "tree"
        tree.mkdir(mode=0o755)
        (tree / "test_one.py").write_text(TEST)
        Path(tmp).chmod(0o755)
        commands = {"/bin/true": ["/bin/true"],
                    "python -c pass": [sys.executable, "-c", "pass"],
                    "pytest, one test": [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                         str(tree / "test_one.py")]}
        for name, cmd in commands.items():
            times = {"bare": [], "sandboxed": []}
            for _ in range(args.n):
                for label, sandbox in (("bare", Sandbox(enabled=False)), ("sandboxed", Sandbox())):
                    env = scrubbed_env(Path(tmp) / "run", sandbox=sandbox)
                    done = run_logged(cmd, cwd=tree, env=env, log_path=Path(tmp) / "log.txt", timeout=300,
                                      sandbox=sandbox, readable=[tree])
                    assert done.returncode == 0, done.tail()
                    times[label].append(done.seconds)
            bare, boxed = statistics.median(times["bare"]), statistics.median(times["sandboxed"])
            print(f"{name:18s} bare {bare * 1000:7.1f} ms  sandboxed {boxed * 1000:7.1f} ms  "
                  f"overhead {(boxed - bare) * 1000:+7.1f} ms ({(boxed / bare - 1) * 100:+.0f}%)  "
                  f"[sandboxed min {min(times['sandboxed']) * 1000:.1f}, max {max(times['sandboxed']) * 1000:.1f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
