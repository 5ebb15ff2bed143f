"""The C prefilter finds exactly the lines the plain Python scan finds, on real logs."""
from __future__ import annotations

import pytest

from triage_rules.linekinds import PREFILTER_LITERALS
from triage_rules.scan import LinePrefilter, hyperscan


@pytest.mark.skipif(hyperscan is None, reason="no hyperscan wheel for this platform (x86-64 only)")
def test_hyperscan_and_python_agree_on_every_marked_log(marked_logs):
    fast = LinePrefilter(PREFILTER_LITERALS)
    assert fast.engine == "hyperscan"
    for log in marked_logs:
        data = log.text.encode()
        middle = data.find(b"\n", len(data) // 2) + 1  # a region that starts mid-buffer, on a line start
        for start, end in ((0, len(data)), (middle, len(data))):
            assert fast.line_starts(data, start, end) == fast._python_line_starts(data, start, end), log.name


def test_lines_with_literals_are_found_once_and_others_never():
    scan = LinePrefilter(("rror", "imeout"))
    data = b"ok\nan error and another error\nfine\nTimeout!\nlast rror"
    starts = scan.line_starts(data, 0, len(data))
    assert [data[s:data.find(b"\n", s) if data.find(b"\n", s) >= 0 else len(data)] for s in starts] == [
        b"an error and another error", b"Timeout!", b"last rror"]
    assert scan.line_starts(data, 5, 5) == []
