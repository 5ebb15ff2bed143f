"""Streaming: classifying a big log keeps memory bounded (peak RSS measured in a subprocess)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

GENERATE = textwrap.dedent('''
    import sys
    lines = [
        "2026-07-30T13:21:30.1Z [%d/9000] Building CXX object kernels/portable/CMakeFiles/op_%d.dir/op.cpp.o\\n",
        "2026-07-30T13:21:30.2Z test_ops.py::TestOps::test_add_%d PASSED [0.01s]\\n",
        "2026-07-30T13:21:30.3Z E 00:00:%02d.000001 executorch:method.cpp:85] Backend QnnBackend is not registered.\\n",
        "2026-07-30T13:21:30.4Z FAILED t.py::T::test_%d - RuntimeError: Failed to execute method forward, error: 0x20\\n",
    ]
    target, path = int(sys.argv[1]), sys.argv[2]
    with open(path, "w") as out:
        written, i = 0, 0
        while written < target:
            block = "".join(lines[0] % (i, i) + lines[1] % i for _ in range(40)) + (lines[2] % (i % 60) if i % 7 == 0 else "") + (lines[3] % i if i % 11 == 0 else "")
            out.write(block)
            written += len(block)
            i += 1
''')

MEASURE = textwrap.dedent('''
    import resource, sys
    from triage_rules import classify_file, classify_text
    classify_text("error: warm up the engine and its learned model first\\n")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    failures = classify_file(sys.argv[1])
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(len(failures), before // 1024, after // 1024)
''')


def _peak_growth_mb(tmp_path, size: int) -> tuple[int, int]:
    log = tmp_path / "big.log"
    subprocess.run([sys.executable, "-c", GENERATE, str(size), str(log)], check=True, timeout=600)
    out = subprocess.run([sys.executable, "-c", MEASURE, str(log)], check=True, capture_output=True, text=True, timeout=1200)
    count, before, after = map(int, out.stdout.split())
    return count, after - before


def test_20mb_log_memory_is_bounded(tmp_path):
    count, growth = _peak_growth_mb(tmp_path, 20 * 1024 * 1024)
    assert count >= 10
    assert growth < 120, f"peak RSS grew by {growth} MB for a 20 MB log"


@pytest.mark.slow
def test_1gb_log_memory_is_bounded(tmp_path):
    count, growth = _peak_growth_mb(tmp_path, 1024 * 1024 * 1024)
    assert count >= 10
    assert growth < 120, f"peak RSS grew by {growth} MB for a 1 GB log"
