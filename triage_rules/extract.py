"""Failure extraction: one streaming pass over a log, bounded memory, failures best first.

Shape of the pass:
    byte blocks (line aligned) ─▶ one multi-literal scan of the block in C (scan.LinePrefilter)
        ─▶ only lines it hits are decoded, cleaned and classified (linekinds)
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
from triage_rules.readers import clean_line, clean_lines
from triage_rules.records import Frame
from triage_rules.scan import LinePrefilter

try:  # a dependency of the learned classifier; only speeds up line counting here
    import numpy
except ImportError:  # pragma: no cover
    numpy = None

LOOKAHEAD_LINES = 40
LOOKAHEAD_CHARS = 1 << 18
LOOKBACK_CHARS = 1 << 18
TRACEBACK_WINDOW = 1 << 16
CONTEXT_LINES = 3
CONTEXT_LINE_CHARS = 400
NEIGHBOURHOOD_BEFORE, NEIGHBOURHOOD_AFTER, NEIGHBOURHOOD_CHARS = 15, 8, 3000  # a 5 KB compiler command line says nothing a person reads in a comment
MAX_GROUPS = 256
MAX_EVIDENCE = 24
MAX_FRAMES = 40
CLUSTER_GAP = 50  # lines; candidates closer than this without a test id are one incident
FAULTHANDLER_LINES = 400  # faulthandler's dump: 100 frames a thread, the crashing thread last
MAX_LINE_CHARS = 1 << 26
FALLBACK_CHARS = 1 << 16  # the log's tail kept for a failed job whose log matched nothing
REAL_FAILURE = 40  # groups below this score are wrappers/boilerplate, dropped when a real one exists

_PREFILTER = LinePrefilter(PREFILTER_LITERALS)
_TRACEBACK = b"Traceback (most recent call last)"
_CAUSE = b"The above exception was the direct cause"
_FRAME_RE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>.+))?', re.M)
# pytest's own traceback (`--tb=short`, and `auto`'s middle entries): "path.py:772: in _"; the
# long form's entries end on "path.py:286: SpecViolationError". A section header ("____ test ____")
# starts the test's report: no frame above it is the failure's.
_PYTEST_FRAME_RE = re.compile(r"^(?P<file>[^\s:\"']+\.py):(?P<line>\d+): (?:in (?P<func>[\w.<>]+)|[\w.]+)\s*$", re.M)
# pytest draws it to the terminal's width, at least one `_` a side: `_ TestX.test_a_long_name _`
# (not a frame separator, `_ _ _ _`); a CI log may stamp the line's start.
_PYTEST_SECTION = re.compile(rb"\n(?:\xef\xbb\xbf)?(?:\d{4}-\d\d-\d\dT[\d:.]+Z ?)?_+ [^\s_][^\n]* _+\r?\n")
PYTEST_WINDOW = 1 << 13
_WRAPPER_KINDS = frozenset({"gha_exit", "wrapper", "build_wrapper", "summary", "section", "gha_timeout"})
_EXIT_KINDS = frozenset({"gha_exit", "wrapper"})
_NAMES_THE_TEST = frozenset({"pytest_summary", "pytest_section", "unittest_header", "pytest_progress_failed"})
_TEST_KEY_RE = re.compile(r"^(.*?)(\[.*\])?$")
# pytest's banners of its reports: what comes before one is its progress, not this test's
_BANNER = re.compile(r"^={3,} (?:FAILURES|ERRORS|RERUNS) ={3,}$")
_SUMMARY_BANNER = re.compile(r"^={3,} short test summary info ={3,}$")


@dataclass
class Around:
    """The raw bytes around a candidate line, decoded and cleaned only when read: most
    candidates never become a reported failure, so most are never decoded."""

    head: bytes = b""
    tail: bytes = b""
    before: int = 0
    after: int = 0
    skip_blank: bool = False

    def lines(self, own: str | None = None, own_above: bool = False) -> list[str]:
        """The lines around; for a test's line (`own`, its test key) only those up to a line that
        names another test, and above it up to one that ends a section: pytest's summary lists
        each failed test on one line, and the next test's `FAILED ... - AssertionError:
        buffers_to_mutate lost ...` says nothing of this one, nor does the traceback above
        `=== short test summary ===`.
        Above it, the lines after another test's line are that test's too (`assert 'k_cache' in
        {}`, the rest of its summary's message). Above pytest's summary is the report of the
        test it reported last: a summary line reads across it when that test is its own
        (`own_above`)."""
        head = clean_lines(self.head.decode("utf-8", "replace"))[-self.before:] if self.head else []
        tail = clean_lines(self.tail.decode("utf-8", "replace"))[:self.after] if self.tail else []
        if own is not None:
            kept, other = _own_run(reversed(head), own, own_above)
            head = head[len(head) - kept:] if not other else []  # between: the other test's (its message's next lines)
            tail = tail[:_own_run(tail, own, ends=False)[0]]
        return [_clip(text) for text in head + tail if text.strip() or not self.skip_blank]


def _own_run(lines: Iterable[str], own: str, own_above: bool = False, ends: bool = True) -> tuple[int, bool]:
    """How many of `lines` come before the first one that names a test other than `own` or (with
    `ends`, reading upwards) ends a section (`=== short test summary info ===`, unless
    `own_above`), and whether it was another test's."""
    count = 0
    for text in lines:
        info = classify_line(text)
        if ends and (info is not None and info.ends_test or _BANNER.match(text)) and not (
                own_above and _SUMMARY_BANNER.match(text)):
            return count, False
        if info is not None and info.test and info.kind != "faulthandler_test_frame" and test_key(info.test) != own:
            return count, True
        count += 1
    return count, False


@dataclass
class Candidate:
    line_no: int
    line: str
    info: LineInfo
    score: int
    test: str | None = None
    raw_context: Around = field(default_factory=Around)
    frames: list[Frame] = field(default_factory=list)
    raw_neighbourhood: Around = field(default_factory=Around)
    own_above: bool = False  # a summary line of the test pytest reported last, just above its summary

    @property
    def context(self) -> list[str]:
        return self.raw_context.lines(self._own(), self.own_above)

    @property
    def neighbourhood(self) -> list[str]:
        """What the learned model reads around a primary line (blank lines left out)."""
        return self.raw_neighbourhood.lines(self._own(), self.own_above)

    def _own(self) -> str | None:
        return test_key(self.test) if self.test else None


@dataclass
class FailureGroup:
    key: tuple
    best: Candidate
    evidence: list[Candidate]
    test: str | None = None
    kept: bool = False  # a test's verdict alone (its error not in the log), kept beside real failures

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

    def stated(self) -> Candidate:
        """The line that states the failure: the best one, unless that is pytest's summary line.
        Without a terminal and without `CI` set, pytest cuts the summary to 80 columns: `FAILED
        t.py::T::t - SpecViolationError: call_mo...`, `... - SpecViolationError:...`, or, for a
        long test id, no message at all. Then the same test's exception line the summary's
        `Error: message` starts (or, naming no exception, the line its message starts: `worker
        'gw1' crashed while r...`), or, with no message, the group's best line that is not a
        header naming the test. A whole summary line stays (PyTorch's CI marks it as the failure's
        line), unless a line outranks the one it restates (_beside_restated)."""
        best = self.best
        if best.info.kind != "pytest_summary":
            return best
        if best.info.exception:
            if not best.info.message.endswith("..."):
                return self._beside_restated(best)
            said = f"{best.info.exception}: {best.info.message[:-3]}".rstrip(" :")
            lines = [c for c in self.evidence if c.info.exception and f"{c.info.exception}: {c.info.message}".startswith(said)]
        elif best.info.message == best.line.strip():  # no message
            lines = [c for c in self.evidence if c.score >= REAL_FAILURE and c.info.kind not in _NAMES_THE_TEST]
        elif best.info.message.endswith("..."):  # a message naming no exception, cut
            said = best.info.message[:-3]
            lines = [c for c in self.evidence if c.info.message.startswith(said)]
        else:  # a message naming no exception: whole, as far as can be told
            return best
        return max((c for c in lines if c is not best), key=lambda c: c.score, default=best)  # ties: the earlier

    def _beside_restated(self, summary: Candidate) -> Candidate:
        """A whole summary line stands for the exception line it restates: when another of the
        test's lines outranks that one (a backend's own error under the generic exception that
        wraps it: `[ERROR] [Qnn ExecuTorch]: ... Failed to append node` under `AssertionError:
        Failed to generate Qnn context binary.`), that line states the failure, as it does where
        the test's output stands alone."""
        said = _raised(summary)
        restated = [c.score for c in self.evidence if c is not summary and c.info.exception and _raised(c) == said]
        if not restated:
            return summary
        top = max((c for c in self.evidence if c.info.kind not in _NAMES_THE_TEST), key=lambda c: c.score, default=None)
        return top if top is not None and top.score > max(restated) else summary


def _raised(cand: Candidate) -> tuple[str, str]:
    """What a line says was raised, whatever module the exception's name is given in."""
    return cand.info.exception.rsplit(".", 1)[-1], cand.info.message


def _better_test_id(new: str, old: str) -> bool:
    return ("::" in new, len(new)) > ("::" in old, len(old))


def test_key(test: str) -> str:
    """Group key of a test id: `a/b.py::C::test_x[p]`, `C.test_x[p]`, `test_x[p]` all agree. A
    file (`a/test_b.py`: pytest-xdist's report of a crashed worker, a collection error) is its
    whole path: two files are two keys."""
    base, params = _TEST_KEY_RE.match(test).groups()
    if base.endswith(".py") and "::" not in base:
        return base + (params or "")
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
        self._crash_without_test: Candidate | None = None  # `Fatal Python error`, its dump to come
        self._reported_last: str | None = None  # the test whose report is just above pytest's summary
        self._gtest_running: str | None = None  # the googletest test started last and not done
        self._ctest_crash: Candidate | None = None  # ctest's verdict on a crash, its output to come
        self._ctest_names: dict[str, str] = {}  # ctest's test -> the googletest test that crashed it
        self._ctest_verbose = False  # `ctest -V`: a test's output comes before its verdict
        self._ctest_failed: Candidate | None = None  # ctest's `***Failed`, its output to come
        self._real_since_verdict = False  # a real failure was read since ctest's last verdict
        self.tail_text = ""

    def run(self, blocks: Iterable[bytes]) -> list[FailureGroup]:
        """Scan a log given as byte blocks, cut anywhere (invalid UTF-8 is decoded with
        replacement, line by line)."""
        history, tail, line_no = b"", b"", 1
        ends_with_newline = True
        for block in itertools.chain(blocks, [None]):
            final = block is None
            if block:
                ends_with_newline = block.endswith(b"\n")
            buf = b"".join((history, tail, block or b""))
            start = len(history)
            end = len(buf) if final else start + _commit_point(buf, start)
            if end == start and len(buf) - start > MAX_LINE_CHARS:
                end = len(buf)  # one pathological line: scan it in pieces rather than grow forever
            line_no = self._scan(buf, start, end, line_no)
            keep_from = max(0, end - LOOKBACK_CHARS)
            if keep_from:
                nl = buf.find(b"\n", keep_from, end)
                keep_from = nl + 1 if nl >= 0 else end
            history, tail = buf[keep_from:end], buf[end:]
        self._settle_ctest_crash()
        self._settle_ctest_failed()
        self.lines_read = line_no - (1 if ends_with_newline else 0)
        self.tail_text = history[-FALLBACK_CHARS:].decode("utf-8", "replace")
        return self._ranked()

    # -- the hot loop -------------------------------------------------------------------
    def _scan(self, buf: bytes, start: int, end: int, line_no: int) -> int:
        """Examine, in order, every line of buf[start:end] the prefilter reports; return the
        line number after `end`."""
        counted_pos, count, find = start, _newlines(buf), buf.find
        for line_start in _PREFILTER.line_starts(buf, start, end):
            line_no += count(b"\n", counted_pos, line_start)
            counted_pos = line_start
            line_end = find(b"\n", line_start, end)
            self._examine(buf, line_start, end if line_end < 0 else line_end, line_no)
        return line_no + count(b"\n", counted_pos, end)

    # -- one candidate line -------------------------------------------------------------
    def _examine(self, buf: bytes, ls: int, le: int, line_no: int) -> None:
        info = classify_line(line := clean_line(buf[ls:le].decode("utf-8", "replace")))
        if info is None:
            return
        if info.kind == "section" and _SUMMARY_BANNER.match(info.message):
            self._reported_last = self._current_test
        if info.ends_test:
            self._current_test = None
        if info.sets_test:
            self._current_test = info.test
        if info.kind == "faulthandler_test_frame":
            self._crash_in_test(info.test, line_no)
        elif info.kind in ("gtest_run", "gtest_done"):
            self._gtest_running = info.test
        elif info.kind == "ctest_header":
            self._ctest_verbose = True
        running = None
        if info.kind.startswith("ctest_") and info.test:  # a verdict: the output before it is done
            self._settle_ctest_crash()
            running, self._gtest_running = self._gtest_running, None
        if info.score <= 0:
            return
        if info.kind == "xdist_crash":
            self._drop_file_section(info.test)
        cand = Candidate(line_no, line, info, info.score, test=info.test)
        cand.own_above = bool(info.kind == "pytest_summary" and self._reported_last
                              and test_key(self._reported_last) == test_key(info.test))
        if info.kind in ("ctest_crash", "ctest_timeout"):
            cand.test = self._ctest_names.get(info.test) or running or info.test
            if running:  # `ctest -V`: the test's output came before its verdict
                self._ctest_names[info.test] = running
            elif info.test not in self._ctest_names:  # `--output-on-failure`: it follows
                self._ctest_crash = cand
        if cand.test is None and self._current_test and info.kind not in _WRAPPER_KINDS and not line.startswith("##["):
            cand.test = self._current_test
        if info.exception and info.kind == "exception":
            frames, teardown = _python_traceback(buf, ls)
            cand.frames = frames
            if teardown:
                cand.score -= 40  # an exception while shutting down, after the real failure
            if buf.find(_CAUSE, le, le + 400) >= 0:
                cand.score -= 15  # the chained exception that follows carries more context
        elif info.frame:
            cand.frames = [Frame(info.frame[0], info.frame[1], "")]
        cand.raw_context = _around(buf, ls, le, CONTEXT_LINES, CONTEXT_LINES, TRACEBACK_WINDOW)
        group = self._group_for(cand)
        if cand.score >= REAL_FAILURE - 10 and (group.best is cand or cand.score > group.best.score):
            # only a line that becomes a primary one
            cand.raw_neighbourhood = _around(buf, ls, le, NEIGHBOURHOOD_BEFORE, NEIGHBOURHOOD_AFTER,
                                             NEIGHBOURHOOD_CHARS, skip_blank=True)
        group.add(cand)
        if info.kind.startswith("ctest_") and info.sets_test or info.kind == "summary":  # a verdict, not its list
            self._ctest_verdict(cand)
        elif cand.score >= REAL_FAILURE:
            self._real_since_verdict = True
        if cand.test is None and info.kind == "crash_signal" and "Fatal Python error" in line:
            self._crash_without_test = cand
        elif cand.score >= REAL_FAILURE:
            self._crash_without_test = None  # another failure: a later dump is not this crash's
        if info.kind in _EXIT_KINDS:
            fallback = _last_output_before(buf, ls, line_no)
            if fallback is not None:
                group.add(fallback)

    def _crash_in_test(self, test: str, line_no: int) -> None:
        """faulthandler's dump names the test function the crashed interpreter was running (the
        first test frame after `Fatal Python error`): the crash becomes that test's failure,
        one entry with pytest-xdist's `worker 'gw1' crashed while running` and its summary line."""
        cand, self._crash_without_test = self._crash_without_test, None
        if cand is not None and line_no - cand.line_no <= FAULTHANDLER_LINES:
            self._move(cand, test)

    def _settle_ctest_crash(self) -> None:
        """A ctest test that crashed or hung (`--output-on-failure`: its output follows the
        verdict) is the googletest test its output started last and never finished: `1/2 Test
        #1: method_test ...***Exception: SegFault` is `MethodTest.TwoMethods`'s crash, and so is
        ctest's `1 - method_test (SEGFAULT)` in its list of failed tests."""
        cand, self._ctest_crash = self._ctest_crash, None
        if cand is None:
            return
        running, self._gtest_running = self._gtest_running, None
        if running:
            self._ctest_names[cand.info.test] = running
            self._move(cand, running)

    def _ctest_verdict(self, cand: Candidate) -> None:
        """ctest's `N/M Test #N: name ...***Failed` (or its count, which ends the last test's
        output): a test whose output held no failure of its own is kept beside the others, as
        its error not in the log; one whose output did (googletest's assertion, under its own
        test's name) has its failure there."""
        self._settle_ctest_failed()
        if cand.info.kind == "ctest_failed":
            if self._ctest_verbose:  # its output came before it
                self._keep_silent(cand)
            else:
                self._ctest_failed = cand
        self._real_since_verdict = False

    def _settle_ctest_failed(self) -> None:
        cand, self._ctest_failed = self._ctest_failed, None
        if cand is not None:
            self._keep_silent(cand)

    def _keep_silent(self, cand: Candidate) -> None:
        if not self._real_since_verdict:
            group = self.groups.get(("test", test_key(cand.test))) if cand.test else None
            if group is not None and any(c is cand for c in group.evidence):
                group.kept = True

    def _move(self, cand: Candidate, test: str) -> None:
        """`cand` is `test`'s failure, no longer the group's it was put in."""
        for key, group in list(self.groups.items()):
            if any(c is cand for c in group.evidence):
                group.evidence = [c for c in group.evidence if c is not cand]
                if not group.evidence:
                    del self.groups[key]
                elif group.best is cand:
                    group.best = max(group.evidence, key=lambda c: (c.score, -c.line_no))
                break
        cand.test = test
        self._group_for(cand).add(cand)

    def _drop_file_section(self, test: str) -> None:
        """pytest-xdist reports a crashed worker under a section named after the test's file
        (`____ a/test_x.py ____`) and names the test on the next line: the section alone is no
        failure of the file's, but the named test's. A parametrised test's crash, which
        faulthandler's frame named without its parameters (`test_y`, not `test_y[int8]`), is
        that test's too."""
        base = _TEST_KEY_RE.match(test).group(1)
        if base != test:
            bare = self.groups.get(("test", test_key(base)))
            if bare is not None and all(c.info.kind == "crash_signal" for c in bare.evidence):
                for cand in list(bare.evidence):
                    self._move(cand, test)
        current = self._current_test
        if current and test_key(current) != test_key(test):
            group = self.groups.get(("test", test_key(current)))
            if group is not None and all(c.info.kind == "pytest_section" for c in group.evidence):
                del self.groups[group.key]

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
            if len(self.groups) >= 2 * MAX_GROUPS:  # prune in batches: amortised O(1) per group
                keep = sorted(self.groups.values(), key=lambda g: (-g.best.score, g.best.line_no))[:MAX_GROUPS - 1]
                self.groups = {g.key: g for g in sorted(keep, key=lambda g: g.best.line_no)}
            group = self.groups[key] = FailureGroup(key, cand, [], cand.test)
        return group

    def _ranked(self) -> list[FailureGroup]:
        ranked = sorted(self.groups.values(), key=lambda g: (-g.best.score, g.best.line_no))[:MAX_GROUPS]
        if ranked and ranked[0].best.score >= REAL_FAILURE:
            return [g for g in ranked if g.best.score >= REAL_FAILURE or g.kept]
        return ranked[:1]


def _commit_point(buf: bytes, start: int) -> int:
    """How much of buf[start:] to scan now: the last lines stay back as look-ahead."""
    floor = max(start, len(buf) - LOOKAHEAD_CHARS)
    idx = len(buf) - 1
    for _ in range(LOOKAHEAD_LINES):
        idx = buf.rfind(b"\n", floor, idx)
        if idx < 0:
            nl = buf.find(b"\n", floor) if floor > start else -1
            return 0 if nl < 0 else nl + 1 - start
    return idx + 1 - start


def _line(buf: bytes, start: int, end: int) -> str:
    return clean_line(buf[start:end].decode("utf-8", "replace"))


def _around(buf: bytes, ls: int, le: int, before: int, after: int, limit: int, skip_blank: bool = False) -> Around:
    """The raw lines before and after buf[ls:le] (not that line), within `limit` bytes either
    side; copied out of the block, decoded only when read."""
    floor, ceiling = max(0, ls - limit), min(len(buf), le + limit)
    lo = ls
    for _ in range(before):
        if lo <= floor:
            break
        found = buf.rfind(b"\n", floor, lo - 1)
        lo = found + 1 if found >= 0 else floor
    hi = le
    for _ in range(after):
        if hi >= ceiling:
            break
        found = buf.find(b"\n", hi + 1, ceiling)
        hi = found if found >= 0 else ceiling
    return Around(buf[lo:ls - 1] if ls - 1 > lo else b"", buf[le + 1:hi] if hi > le + 1 else b"",
                  before, after, skip_blank)


def _clip(text: str) -> str:
    return text if len(text) <= CONTEXT_LINE_CHARS else text[:CONTEXT_LINE_CHARS] + " …"


def _python_traceback(buf: bytes, ls: int) -> tuple[list[Frame], bool]:
    """Frames of the traceback that ends at the exception line at `ls`, and whether it was
    raised during teardown (`Exception ignored in ...`)."""
    header = buf.rfind(_TRACEBACK, max(0, ls - TRACEBACK_WINDOW), ls)
    if header < 0:
        return _pytest_frames(buf, ls), False
    body = buf[header:ls].decode("utf-8", "replace").split("\n")[1:-1]
    stray = sum(1 for raw in body if (text := clean_line(raw)) and not text[0].isspace())
    if stray > 3:
        return [], False  # that header belongs to an earlier traceback
    frames = [
        Frame(m.group("file"), int(m.group("line")), (m.group("func") or "").strip())
        for m in _FRAME_RE.finditer("\n".join(clean_line(raw) for raw in body))
    ]
    teardown = buf.find(b"Exception ignored", max(0, header - 400), header) >= 0
    return frames[-MAX_FRAMES:], teardown


def _pytest_frames(buf: bytes, ls: int) -> list[Frame]:
    """The frames of pytest's report of the exception line at `ls` ("E   SpecViolationError:
    ..."), read back to the test's section header."""
    start = max(0, ls - PYTEST_WINDOW)
    sections = list(_PYTEST_SECTION.finditer(buf, start, ls))
    body = buf[sections[-1].end() if sections else start:ls].decode("utf-8", "replace")
    frames = [Frame(m.group("file"), int(m.group("line")), m.group("func") or "")
              for m in _PYTEST_FRAME_RE.finditer("\n".join(clean_line(raw) for raw in body.split("\n")))]
    return frames[-MAX_FRAMES:]


def _last_output_before(buf: bytes, ls: int, line_no: int) -> Candidate | None:
    """The last line a failing step printed before its exit wrapper: the best guess when a
    script fails without any recognisable error line."""
    pos = ls
    for back in range(1, 7):
        if pos <= 0:
            return None
        prev = buf.rfind(b"\n", 0, pos - 1) + 1
        text = _line(buf, prev, pos - 1)
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


def _newlines(buf: bytes):
    """A `bytes.count(b"\n", start, end)` that is fast on long spans: numpy compares a whole
    span with SIMD, where bytes.count loops byte by byte."""
    if numpy is None:
        return buf.count
    array = numpy.frombuffer(buf, dtype=numpy.uint8)

    def count(_newline: bytes, start: int, end: int) -> int:
        if end - start < 4096:
            return buf.count(b"\n", start, end)
        return int(numpy.count_nonzero(array[start:end] == 10))

    return count
