"""Failure extraction: one streaming pass over a log, bounded memory, failures best first.

Shape of the pass:
    text blocks (line aligned) ─▶ str.find of each PREFILTER literal over the block (C speed)
        ─▶ only lines it hits are cleaned and classified (linekinds)
        ─▶ candidates are grouped: by test id when the line names one (or sits in that
           test's FAILURES section), otherwise by proximity (one incident = one group)
        ─▶ each group's best line is its primary line; groups are ranked by that score.

Memory is bounded: a block plus a look-back window (for traceback frames and context) and a
look-ahead of a few lines, at most MAX_GROUPS groups with MAX_EVIDENCE lines each.
"""
from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from triage_rules.linekinds import PREFILTER_LITERALS, LineInfo, classify_line
from triage_rules.readers import clean_line
from triage_rules.records import Frame

LOOKAHEAD_LINES = 40
LOOKAHEAD_CHARS = 1 << 18
LOOKBACK_CHARS = 1 << 18
TRACEBACK_WINDOW = 1 << 16
CONTEXT_LINES = 3
CONTEXT_LINE_CHARS = 400  # a 5 KB compiler command line says nothing a person reads in a comment
MAX_GROUPS = 256
MAX_EVIDENCE = 24
MAX_FRAMES = 40
CLUSTER_GAP = 50  # lines; candidates closer than this without a test id are one incident
REAL_FAILURE = 40  # groups below this score are wrappers/boilerplate, dropped when a real one exists

_FRAME_RE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>.+))?', re.M)
_WRAPPER_KINDS = frozenset({"gha_exit", "wrapper", "build_wrapper", "summary", "section", "gha_timeout"})
_EXIT_KINDS = frozenset({"gha_exit", "wrapper"})
_TEST_KEY_RE = re.compile(r"^(.*?)(\[.*\])?$")


@dataclass
class Candidate:
    line_no: int
    line: str
    info: LineInfo
    score: int
    test: str | None = None
    context: list[str] = field(default_factory=list)
    frames: list[Frame] = field(default_factory=list)


@dataclass
class FailureGroup:
    key: tuple
    best: Candidate
    evidence: list[Candidate]
    test: str | None = None

    def add(self, cand: Candidate) -> None:
        if cand.score > self.best.score:
            self.best = cand  # ties keep the earlier line: the root comes before its cascade
        if cand.test and (self.test is None or _better_test_id(cand.test, self.test)):
            self.test = cand.test
        self.evidence.append(cand)
        if len(self.evidence) > MAX_EVIDENCE:
            weakest = min(range(len(self.evidence)), key=lambda i: (self.evidence[i].score, -i))
            if self.evidence[weakest] is not self.best:
                del self.evidence[weakest]
            else:
                del self.evidence[0 if weakest else 1]


def _better_test_id(new: str, old: str) -> bool:
    return ("::" in new, len(new)) > ("::" in old, len(old))


def test_key(test: str) -> str:
    """Group key of a test id: `a/b.py::C::test_x[p]`, `C.test_x[p]`, `test_x[p]` all agree."""
    base, params = _TEST_KEY_RE.match(test).groups()
    return re.split(r"::|\.|/", base)[-1] + (params or "")


class Extractor:
    """Feed line-aligned text blocks with run(); get failure groups, most important first."""

    def __init__(self) -> None:
        self.groups: dict[tuple, FailureGroup] = {}
        self.lines_read = 0
        self._current_test: str | None = None
        self._cluster: tuple | None = None
        self._cluster_last = -(10**9)
        self._cluster_seq = 0

    def run(self, blocks: Iterable[str]) -> list[FailureGroup]:
        history, tail, line_no = "", "", 1
        ends_with_newline = True
        for block in itertools.chain(blocks, [None]):
            final = block is None
            if block:
                ends_with_newline = block.endswith("\n")
            pending = tail + (block or "")
            commit = len(pending) if final else _commit_point(pending)
            buf = history + pending
            start, end = len(history), len(history) + commit
            self._scan(buf, start, end, line_no)
            line_no += buf.count("\n", start, end)
            keep_from = max(0, end - LOOKBACK_CHARS)
            if keep_from:
                nl = buf.find("\n", keep_from, end)
                keep_from = nl + 1 if nl >= 0 else end
            history, tail = buf[keep_from:end], pending[commit:]
        self.lines_read = line_no - (1 if ends_with_newline else 0)
        return self._ranked()

    # -- the hot loop -------------------------------------------------------------------
    def _scan(self, buf: str, start: int, end: int, line_no: int) -> None:
        """Examine, in order, every line of buf[start:end] holding a prefilter literal."""
        find, rfind = buf.find, buf.rfind
        line_starts: set[int] = set()
        for literal in PREFILTER_LITERALS:
            hit = find(literal, start, end)
            while hit >= 0:
                line_starts.add(rfind("\n", 0, hit) + 1)
                line_end = find("\n", hit, end)
                if line_end < 0:
                    break
                hit = find(literal, line_end, end)
        counted_pos, count = start, buf.count
        for line_start in sorted(line_starts):
            line_no += count("\n", counted_pos, line_start)
            counted_pos = line_start
            line_end = find("\n", line_start)
            self._examine(buf, line_start, len(buf) if line_end < 0 else line_end, line_no)

    # -- one candidate line -------------------------------------------------------------
    def _examine(self, buf: str, ls: int, le: int, line_no: int) -> None:
        line = clean_line(buf[ls:le])
        info = classify_line(line)
        if info is None:
            return
        if info.ends_test:
            self._current_test = None
        if info.sets_test:
            self._current_test = info.test
        if info.score <= 0:
            return
        cand = Candidate(line_no, line, info, info.score, test=info.test)
        if cand.test is None and self._current_test and info.kind not in _WRAPPER_KINDS and not line.startswith("##["):
            cand.test = self._current_test
        if info.exception and info.kind == "exception":
            frames, teardown = _python_traceback(buf, ls)
            cand.frames = frames
            if teardown:
                cand.score -= 40  # an exception while shutting down, after the real failure
            if "The above exception was the direct cause" in buf[le:le + 400]:
                cand.score -= 15  # the chained exception that follows carries more context
        elif info.frame:
            cand.frames = [Frame(info.frame[0], info.frame[1], "")]
        cand.context = _context(buf, ls, le)
        group = self._group_for(cand)
        group.add(cand)
        if info.kind in _EXIT_KINDS:
            fallback = _last_output_before(buf, ls, line_no)
            if fallback is not None:
                group.add(fallback)

    def _group_for(self, cand: Candidate) -> FailureGroup:
        if cand.test:
            key: tuple = ("test", test_key(cand.test))
        else:
            if self._cluster is None or cand.line_no - self._cluster_last > CLUSTER_GAP:
                self._cluster_seq += 1
                self._cluster = ("cluster", self._cluster_seq)
            self._cluster_last = cand.line_no
            key = self._cluster
        group = self.groups.get(key)
        if group is None:
            if len(self.groups) >= MAX_GROUPS:
                weakest = min(self.groups.values(), key=lambda g: (g.best.score, -g.best.line_no))
                del self.groups[weakest.key]
            group = self.groups[key] = FailureGroup(key, cand, [], cand.test)
        return group

    def _ranked(self) -> list[FailureGroup]:
        ranked = sorted(self.groups.values(), key=lambda g: (-g.best.score, g.best.line_no))
        if ranked and ranked[0].best.score >= REAL_FAILURE:
            return [g for g in ranked if g.best.score >= REAL_FAILURE]
        return ranked[:1]


def _commit_point(pending: str) -> int:
    """Where the scannable part of `pending` ends: keep the last lines back as look-ahead."""
    floor = max(0, len(pending) - LOOKAHEAD_CHARS)
    idx = len(pending) - 1
    for _ in range(LOOKAHEAD_LINES):
        idx = pending.rfind("\n", floor, idx)
        if idx < 0:
            return 0 if floor == 0 else pending.find("\n", floor) + 1
    return idx + 1


def _context(buf: str, ls: int, le: int) -> list[str]:
    before: list[str] = []
    pos = ls
    for _ in range(CONTEXT_LINES):
        if pos <= 0:
            break
        prev = buf.rfind("\n", 0, pos - 1) + 1
        before.append(clean_line(buf[prev:pos - 1]))
        pos = prev
    after: list[str] = []
    pos = le + 1
    for _ in range(CONTEXT_LINES):
        if pos >= len(buf):
            break
        nxt = buf.find("\n", pos)
        nxt = len(buf) if nxt < 0 else nxt
        after.append(clean_line(buf[pos:nxt]))
        pos = nxt + 1
    return [_clip(text) for text in before[::-1] + after]


def _clip(text: str) -> str:
    return text if len(text) <= CONTEXT_LINE_CHARS else text[:CONTEXT_LINE_CHARS] + " …"


def _python_traceback(buf: str, ls: int) -> tuple[list[Frame], bool]:
    """Frames of the traceback that ends at the exception line at `ls`, and whether it was
    raised during teardown (`Exception ignored in ...`)."""
    header = buf.rfind("Traceback (most recent call last)", max(0, ls - TRACEBACK_WINDOW), ls)
    if header < 0:
        return [], False
    body = buf[header:ls].split("\n")[1:-1]
    stray = sum(1 for raw in body if (text := clean_line(raw)) and not text[0].isspace())
    if stray > 3:
        return [], False  # that header belongs to an earlier traceback
    frames = [
        Frame(m.group("file"), int(m.group("line")), (m.group("func") or "").strip())
        for m in _FRAME_RE.finditer("\n".join(clean_line(raw) for raw in body))
    ]
    teardown = "Exception ignored" in buf[max(0, header - 400):header]
    return frames[-MAX_FRAMES:], teardown


def _last_output_before(buf: str, ls: int, line_no: int) -> Candidate | None:
    """The last line a failing step printed before its exit wrapper: the best guess when a
    script fails without any recognisable error line."""
    pos = ls
    for back in range(1, 7):
        if pos <= 0:
            return None
        prev = buf.rfind("\n", 0, pos - 1) + 1
        text = clean_line(buf[prev:pos - 1])
        pos = prev
        stripped = text.strip()
        if not stripped or stripped.startswith(("##[", "+ ", "++ ")):
            continue
        info = classify_line(text)
        if info is not None and info.kind in _WRAPPER_KINDS:
            continue
        fallback = LineInfo("last_output", 32, message=stripped)
        return Candidate(line_no - back, text, fallback, fallback.score)
    return None
