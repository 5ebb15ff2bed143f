"""The prefilter: which lines of a block hold any of the candidate literals, found in C.

One multi-pattern scan over a whole block of bytes (Hyperscan: all literals at once, one report
per matching line) replaces a Python loop per line or per literal. Only the lines it reports
are decoded and examined by Python (linekinds). Without the `hyperscan` package (it is built
for x86-64 only) the same lines are found with one `bytes.find` pass per literal, slower but
equal in result.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

try:  # optional at run time: a platform without a hyperscan wheel still works, only slower
    import hyperscan
except ImportError:  # pragma: no cover - exercised on platforms without the wheel
    hyperscan = None


class LinePrefilter:
    """Start offsets of the lines in buf[start:end] that contain any of `literals`."""

    def __init__(self, literals: Sequence[str]) -> None:
        self.literals = tuple(literal.encode() for literal in literals)
        self.engine = "python"
        self._db = None
        if hyperscan is not None:
            # `literal[^\n]*\n`: a match ends at the line's newline, and Hyperscan reports one end
            # offset once, so a line with many literals is reported once.
            alternation = b"(?:" + b"|".join(re.escape(lit) for lit in self.literals) + b")[^\n]*(?:\n|$)"
            self._db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
            self._db.compile(expressions=[alternation], ids=[0], elements=1, flags=[0])
            self.engine = "hyperscan"

    def line_starts(self, buf: bytes, start: int, end: int) -> list[int]:
        """Sorted, distinct start offsets (into buf) of the matching lines of buf[start:end]."""
        if start >= end:
            return []
        if self._db is None:
            return self._python_line_starts(buf, start, end)
        ends: list[int] = []
        self._db.scan(memoryview(buf)[start:end], match_event_handler=_collect, context=ends)
        rfind = buf.rfind
        # rfind gives -1 for the region's first line: -1 + 1 = 0, and `or start` clamps it
        return sorted({rfind(b"\n", start, start + stop - 1) + 1 or start for stop in ends})

    def _python_line_starts(self, buf: bytes, start: int, end: int) -> list[int]:
        find, rfind = buf.find, buf.rfind
        starts: set[int] = set()
        for literal in self.literals:
            hit = find(literal, start, end)
            while hit >= 0:
                starts.add(max(start, rfind(b"\n", 0, hit) + 1))
                line_end = find(b"\n", hit, end)
                if line_end < 0:
                    break
                hit = find(literal, line_end, end)
        return sorted(starts)


def _collect(_id: int, _from: int, to: int, _flags: int, ends: list[int]) -> None:
    ends.append(to)
