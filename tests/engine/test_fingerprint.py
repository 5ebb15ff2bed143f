"""Fingerprints: volatile tokens of real lines normalised away, the rest kept."""
from __future__ import annotations

import pytest

from triage_rules import classify_text
from triage_rules.fingerprint import fingerprint, normalise


@pytest.mark.parametrize(
    "line,expected",
    [
        ("RuntimeError: Process 0 terminated or timed out after 310.0115718841553 seconds",
         "RuntimeError: Process <n> terminated or timed out after <dur>"),
        ("RuntimeError: Command docker exec -t 8b9261964e6f35861f8c195a8c3f83b070b36637827e0e5d9292fb3031573168 /exec failed with exit code 1",
         "RuntimeError: Command docker exec -t <sha> /exec failed with exit code <n>"),
        ("E 00:00:47.286110 executorch:QnnManager.cpp:273] Fail to load Qnn library",
         "E <time> executorch:QnnManager.cpp:<n>] Fail to load Qnn library"),
        ("FileNotFoundError: /tmp/pytest-of-runner/pytest-12/test_export0/model.pte",
         "FileNotFoundError: <tmp>"),
        ("2026-07-30T10:55:18.2486986Z FAILED [310.0221s] a.py::T::test_x - RuntimeError: boom",
         "FAILED [<dur>] a.py::T::test_x - RuntimeError: boom"),
        ("Writing document td_test_failure_stats_v2_1785439011_382c8ab48c4b11f19cc39a40abc625c8",
         "Writing document td_test_failure_stats_v2_<n>_<hex>"),
        ("Segmentation fault at 0x00007f3e94600000", "Segmentation fault at <addr>"),
        # pytest-xdist's worker: whichever one ran the test (intel/torch-xpu-ops#2314's log)
        ("worker 'gw19' crashed while running 'test/xpu/test_decomp_xpu.py::TestDecompXPU::test_quick_core'",
         "worker 'gw<n>' crashed while running 'test/xpu/test_decomp_xpu.py::TestDecompXPU::test_quick_core'"),
    ],
)
def test_normalise_real_lines(line, expected):
    assert normalise(line) == expected


def test_same_failure_in_two_jobs_has_one_fingerprint():
    job_a = "2026-07-30T10:00:00.1Z FAILED [3.1s] t.py::T::test_x - RuntimeError: timed out after 301.5 seconds\n"
    job_b = "2026-08-02T11:11:11.9Z FAILED [9.0s] t.py::T::test_x - RuntimeError: timed out after 299.0 seconds\n"
    other = "2026-08-02T11:11:11.9Z FAILED [9.0s] t.py::T::test_y - RuntimeError: timed out after 299.0 seconds\n"
    a, b, c = (classify_text(x)[0].fingerprint for x in (job_a, job_b, other))
    assert a == b != c


def test_fingerprint_is_short_and_stable():
    assert fingerprint("a", None, "x 1") == fingerprint("a", "", "x 2")
    assert len(fingerprint("anything")) == 16
