"""What kind of line is this, and how strongly does it explain a failure?

Each kind is a regex on the cleaned line (timestamp, ANSI codes and a leading `##[error]`
removed) and a base score. The extractor picks the highest-scoring line of a failure as its
primary line; ties go to the earliest line (the root error comes before its cascade).

Score bands (what beats what):
    90  a test that failed even after reruns
    86  googletest's assertion location (`file:line: Failure`)
    85  pytest/unittest/gtest summary lines naming a failed test (with the error)
    80  ExecuTorch/QNN runtime errors, crashes (signals), test verdicts
    70  exception lines, compiler errors, lintrunner, pip/docker verdicts
    60  file-level test wrappers (`X 1/1 failed!`), generic exceptions, CI verdict phrases
    45  `error:` / `fatal:` lines, glog errors
    10-25  wrappers and boilerplate: `Process completed with exit code 1`, `docker exec ...
        failed`, `ninja: build stopped`, pytest's `N failed` banner. They win only when the
        log holds nothing better.
     0  noise: passed tests, xtrace, upload/telemetry chatter, sccache statistics.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from triage_rules import errors


@dataclass(frozen=True)
class LineInfo:
    kind: str
    score: int
    test: str | None = None
    exception: str | None = None
    message: str = ""
    frame: tuple[str, int] | None = None  # (file, line) of a diagnostic
    sets_test: bool = False  # a section header: later lines belong to this test
    ends_test: bool = False  # a section boundary: later lines belong to no test


# Cheap first pass over raw text: a line that contains none of these literals is never
# examined. Plain substrings (str.find runs at memory speed); false positives only cost a
# classify_line call.
PREFILTER_LITERALS: tuple[str, ...] = (
    # Each literal is one pass of str.find over the block, so the list is kept short: "rror"
    # also covers every `##[error]` annotation (cancellations, runner shutdowns...), "ail" the
    # QnnDsp/`N/M failed! Received signal` lines; the rest are failure lines with no such word.
    "rror", "RROR", "ail", "AIL", "atal", "xception", "Interrupt", "enied", "imed out", "took >",
    "Killed", "Segmentation", "dumped", "No space", "registered", "Missing", "undefined ref",
    "kernel '", "Unsupported", "SymNode", "SEGFAULT", "ILLEGAL", "[ RUN ", "Lint for", "____ ", "_ test", "_ Test", ".test", "=====", "rate limit", "efusing",
    "maximum", "dirty", "SIG", "mashing", "CONFLICT (",
    # pytest-xdist's report of a worker that died (`pytest -n auto`, ExecuTorch's unittest job),
    # and faulthandler's frame of the test a crashed interpreter was running
    "crashed while running", " in test",
    # Problems stated without the word error (device labs, QNN, numerics, linters): found by
    # the `problem` kind below, which only wins when a log holds nothing stronger.
    "upported", "imeout", "imed out", "ismatch", "efused", "uthoriz", "annot ", "nable to", "ould not",
    "not found", "not equal", "not close", "xceed", "eformat", "nvalid", "bort", "ffline",
)
# The same set as one regex, for tools that want a pattern (ripgrep in bench/classify.py).
PREFILTER = re.compile("|".join(re.escape(literal) for literal in PREFILTER_LITERALS))
MAX_CLASSIFY_CHARS = 2000  # kinds are decided by a line's head; a 1 MB line costs no more

_EXC_NAME = r"(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*)?(?:Error|Exception|Interrupt|Exit|Expired|Failure|Fault|Violation|Unsupported|SymNode)"
EXCEPTION_RE = re.compile(rf"^({_EXC_NAME})(?::\s?(.*))?$")
EXCEPTION_IN_TEXT_RE = re.compile(rf"^({_EXC_NAME}): ?(.*)$")
# Builtins that are usually a symptom of something else; domain exceptions say more.
GENERIC_EXCEPTIONS = frozenset(
    "AttributeError KeyError IndexError TypeError ValueError NameError Exception Error OSError "
    "FileNotFoundError StopIteration KeyboardInterrupt SystemExit LookupError".split()
)
STRONG_EXCEPTIONS = frozenset(
    "SyntaxError IndentationError ImportError ModuleNotFoundError OutOfMemoryError".split()
)

_NOISE = re.compile(
    r"^\++ "  # bash xtrace
    r"|^\[command\]"
    r"|\s(?:PASSED|SKIPPED|XFAIL|XPASS|xfail|RERUN)\b|\('RERUN'"
    r"|^(?:Cache|Compil\w*|Non-c\w+|Forced|Average|Failed distributed|Unsupported compiler)\b.*\s[\d.]+\s*%?$"
    r"|[Ff]ailed to (?:parse and )?upload|Error uploading metric|[Uu]pload(?:ing)? .*(?:failed|error)"
    r"|storage write check failed|Unable to locate credentials|^\s*warn(?:ings\.warn)?\("
    r"|^hint:|^\s*Caused by:|^\s*note:|^\S*Warning: |DeprecationWarning|PytestUnraisableExceptionWarning"
    r"|-Werror|-Wno-error|^\S*(?:sccache|ccache|c\+\+|g\+\+|gcc|clang\+*|cl\.exe|nvcc)\s+-"
    r"|^\s*\d+\s+\d*\s*\|"  # code listings / diffs (lintrunner, compiler carets)
    r"|^No stepcurrent file|keep running tests even on failure|If your build fails|^Test results will be stored"
    r"|^\s*(?:except|raise|catch|assert|if|return|def|class)\b|^\s+\^"
    r"|The above exception was|During handling of the above exception|^Traceback \(most recent"
    r"|failed and then succeeded|^(?:The following tests )?.*succeeded when run in a new process"
    r"|^\s*(?:Ran|Running) \d+ (?:tests?|items)"
)

_BOILERPLATE: list[tuple[re.Pattern[str], int, str]] = [
    (re.compile(r"Process completed with exit code|\[OSDC\] Step (?:script exited|cancelled)"
                r"|Executing the custom container implementation failed"), 10, "gha_exit"),
    (re.compile(r"Command docker exec .* failed with exit code|^The process '.*' failed with exit code"
                r"|failed with exit code \d+\.?$|returned non-zero exit status|^Got exit code"
                r"|exited with non-zero exit ?code|^Error: Process completed"), 15, "wrapper"),
    (re.compile(r"^ninja: build stopped|^\*\*\* CMake build failed|^make(?:\[\d+\])?: \*\*\* .*Error \d+"
                r"|^ERROR Backend subprocess exited|^error: command '.*' failed|Failed to build one or more wheels"
                r"|^Failed to build \S+$|^collect2: error: ld returned|This error originates from a subprocess"
                r"|^-- Configuring incomplete, errors occurred"), 20, "build_wrapper"),
    (re.compile(r"^Lint failed!?$|^>>> General linter failure|^\[  FAILED  \] \d+ tests?, listed below"
                r"|stopping after \d+ failures|^=+ .*\b\d+ (?:failed|errors?)\b.*=+$|^FAILED \((?:failures|errors)="
                r"|^The following tests failed|^\d+ failed,|^(?:\S+ )?\d+/\d+ failed!?\s*$"
                # pytest's count of the collection errors it reported above, not one of its own
                r"|Interrupted: \d+ errors? during collection"
                # ctest's and buck2's counts and lists of the tests that failed (their output is above, or elsewhere)
                r"|^\d+% tests passed, \d+ tests? failed out of \d+|^The following tests FAILED:|^Errors while running CTest"
                r"|^Tests finished: Pass \d+\. Fail \d+|^\d+ TESTS FAILED$"
                r"|^Test execution completed but the tests failed"
                # pytest-xdist giving up after its workers crashed (each crash is reported by itself)
                r"|^maximum crashed workers reached: \d+"), 20, "summary"),
]

_KINDS: list[tuple[str, re.Pattern[str], int]] = [
    ("test_failed_consistently", re.compile(r"^FAILED CONSISTENTLY: (?P<test>\S+)"), 90),
    ("pytest_summary", re.compile(
        r"^(?:FAILED|ERROR) (?:\[[\d.]+s\] )?(?P<test>\S+?(?:::\S+|\.py))(?: - (?P<msg>.*))?$"), 85),
    ("unittest_header", re.compile(
        r"^(?:FAIL|ERROR)(?: \[[\d.]+s\])?: (?P<name>test\w*) \((?:__main__\.)?(?P<cls>[\w.]+)\)"), 66),
    # pytest-xdist's report of a worker that crashed (a signal, `os._exit`, the OOM killer) while
    # running a test: `worker 'gw1' crashed while running 'a/test_x.py::T::test_y'`
    ("xdist_crash", re.compile(r"^worker '[\w-]+' crashed while running '(?P<test>[^'\s]+)'"), 84),
    # faulthandler's dump after `Fatal Python error: ...`: the frame of the test function the
    # interpreter was running (`  File "/w/test_x.py", line 12 in test_y`, no comma, unlike a
    # traceback); it names the crash's test where no runner did (pytest-xdist, a plain pytest)
    ("faulthandler_test_frame", re.compile(r'^\s*File "(?P<file>[^"\n]+\.py)", line (?P<line>\d+) in (?P<func>test\w*)\s*$'), 0),
    # googletest's assertion location (`file:line: Failure`): names where, unlike the summaries
    ("gtest_assertion", re.compile(r"^(?P<file>[\w./+-]+\.(?:cpp|cc|cxx|h|hpp)):(?P<line>\d+): Failure$"), 86),
    # googletest starting a test: what follows is that test's (no failure of its own)
    ("gtest_run", re.compile(r"^\[ RUN      \] (?P<test>[\w/.]+)"), 0),
    # googletest's end of a binary's run: every test it started has finished (a crash after it,
    # in a static destructor, is no test's)
    ("gtest_done", re.compile(r"^\[=+\] \d+ tests? from \d+ test (?:suites?|cases?) ran\."), 0),
    # `ctest -V`'s header of each test's output: its timeout's "timeout" is no time-out
    ("ctest_header", re.compile(r"^Test (?:command|timeout computed to be): |^Working Directory: "), 0),
    ("gtest_failed", re.compile(r"^\[  FAILED  \] (?P<test>[\w/.]+)"), 80),
    ("probe_failure", re.compile(r"\bProbeFailure: \[(?P<cat>\w+)\] (?P<msg>.*)"), 88),
    # at least one `_` a side: pytest fills the terminal's width, a long test id leaves `_ id _`
    ("pytest_section", re.compile(r"^_+ (?:(?:ERROR|FAILURE) (?:at \w+ of |collecting ))?(?P<test>[^\s_]\S*) _+$"), 75),
    ("pytest_progress_failed", re.compile(r"^(?P<test>\S+::\S+)(?: <- \S+)? (?:FAILED|ERROR)\b"), 55),
    ("test_verdict", re.compile(r"^(?P<test>[\w./:]+) - failed\b"), 80),
    ("benchmark_verdict", re.compile(r"^(?P<test>[A-Za-z]\w*)\s+(?:FAIL|IMPROVED):\s*(?P<msg>.*)"), 80),
    # ctest's verdicts, in its progress (`3/5 Test #3: op_mul_test ....***Exception: SegFault  0.14 sec`)
    # and its list of failed tests (`3 - op_mul_test (SEGFAULT)`): a crash, a time-out, or a plain
    # failure, whose output (`--output-on-failure`) follows the progress line or went elsewhere: no
    # failure of its own beside a real one (the test's output names a finer test, googletest's)
    ("ctest_crash", re.compile(r"^\d+/\d+ Test +#\d+: (?P<test>\S+) \.*\s*(?P<msg>(?:Subprocess aborted)?\*{3}Exception:.*?)"
                               r"\s+[\d.]+ sec$|^\d+ - (?P<test2>\S+) \((?P<msg2>SEGFAULT|Subprocess aborted|ILLEGAL|BUS ERROR"
                               r"|Child aborted|OTHER_FAULT|Exception)\)$"), 82),
    ("ctest_timeout", re.compile(r"^\d+/\d+ Test +#\d+: (?P<test>\S+) \.*\s*(?P<msg>\*{3}Timeout)\s+[\d.]+ sec$"
                                 r"|^\d+ - (?P<test2>\S+) \((?P<msg2>Timeout)\)$"), 60),
    ("ctest_failed", re.compile(r"^\d+/\d+ Test +#\d+: (?P<test>\S+) \.*\s*(?P<msg>\*{3}Failed)\s+[\d.]+ sec$"
                                r"|^\d+ - (?P<test2>\S+) \((?P<msg2>Failed)\)$"), 30),
    ("test_file_signal", re.compile(r"^(?:RuntimeError: )?(?P<test>\S+) \d+/\d+ failed!.*[Ss]ignal"), 82),
    ("test_file_failed", re.compile(r"^(?:RuntimeError: )?(?P<test>\S+) \d+/\d+ failed!"), 60),
    ("pytest_interrupted", re.compile(r"^!{3,} (?P<msg>.*?(?:Interrupt|[Ee]rror).*?) !{3,}$"), 72),
    ("lint_path", re.compile(r"^>>> Lint for (?P<test>.+?):?$"), 78),
    ("lint_error", re.compile(r"^\s*Error \((?P<code>[\w-]+)\) (?P<msg>.*)"), 75),
    ("flake8", re.compile(r"^(?P<file>\S+\.pyi?):(?P<line>\d+):\d+: (?P<code>[A-Z]+\d+) (?P<msg>.*)"), 68),
    ("et_log", re.compile(
        r"^[EF] \d\d:\d\d:\d\d\.\d+ executorch:(?P<file>[\w./-]+):(?P<line>\d+)\] (?P<msg>.*)"), 80),
    ("et_bracket", re.compile(r"^\[(?P<file>[\w./-]+\.(?:cpp|cc|h|c)):(?P<line>\d+)\] (?P<msg>.*)"), 78),
    ("et_execute", re.compile(r"Failed to (?:execute|load|init\w*) (?:method|program|backend)\b"), 78),
    ("et_phrase", re.compile(r"Backend \S+ is not registered|Missing operator: |kernel '[^']+' not found"
                             r"|Missing out variants?:|ProgramVerification|InvalidProgram"), 80),
    ("qnn_error", re.compile(r"^\[(?:ERROR|FATAL)\] \[Qnn[^\]]*\]:? ?(?P<msg>.*)|\bQnn\w* <E> (?P<msg2>.*)"), 80),
    ("qnn_sdk", re.compile(r"Failed to set up QNN SDK|QNN_SDK_ROOT.{0,80}(?:not set|unset|missing)"), 78),
    ("adb_error", re.compile(r"adb(?: command)? failed|adb: error: |error: device (?:offline|unauthorized|not found)"
                             r"|no devices/emulators found|device (?:offline|unauthorized)\b"), 75),
    ("crash_signal", re.compile(r"Segmentation fault|core dumped|Received signal: SIG\w+|Fatal Python error: "
                                r"|Aborted \(core dumped\)|^Killed\s*$|terminate called after throwing "
                                r"|^Bus error|Fatal signal \d+|ERROR: \w+Sanitizer: |by signal SIG(?:SEGV|BUS|ABRT|ILL|FPE)"
                                r"|received signal SIG(?:SEGV|BUS|ABRT|ILL|FPE)|stack smashing detected"
                                r"|double free or corruption|terminating with uncaught exception"), 70),
    ("compiler_error", re.compile(r"^(?P<file>[^\s:][^:]*?):(?P<line>\d+):(?:\d+:)? (?:fatal )?error: (?P<msg>.*)"), 70),
    ("msvc_error", re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?:fatal )?error (?P<code>C\d+): (?P<msg>.*)"), 70),
    ("linker_error", re.compile(r"undefined reference to |ld(?:\.lld)?: error: |Undefined symbols for architecture"), 66),
    ("cmake_error", re.compile(r"^CMake Error(?: at (?P<file>.+?):(?P<line>\d+))?.*"), 68),
    ("ninja_failed", re.compile(r"^FAILED: (?:\[code=\d+\] )?(?P<msg>\S.*)"), 50),
    ("pip_error", re.compile(r"^ERROR: (?P<msg>Failed building wheel for .*|Could not .*|No matching distribution.*"
                             r"|Cannot install .*|ResolutionImpossible.*)"), 70),
    ("docker_error", re.compile(r"^(?:Error response from daemon|docker: Error\w*): (?P<msg>.*)"), 60),
    ("exception", EXCEPTION_RE, 70),
    ("gha_timeout", re.compile(r"The (?:action|job) .{0,200}has timed out|has exceeded the maximum execution time"), 66),
    ("timeout", re.compile(r"\btimed out\b|[Tt]ook >\s?\d+\s?min|\bTimeoutError\b|deadline exceeded"), 65),
    ("rate_limit", re.compile(r"rate limit exceeded|secondary rate limit|too many requests", re.I), 65),
    ("no_space", re.compile(r"No space left on device|out of disk|disk quota exceeded"), 70),
    # git could not merge or rebase the change onto its base (the rule ci-merge-conflict)
    ("git_conflict", re.compile(r"^CONFLICT \([\w/ -]+\): |^Automatic merge failed|^error: could not apply [0-9a-f]{7,}"), 62),
    ("ci_verdict", re.compile(
        r"\b[Rr]efus(?:e|es|ing) to\b|\b(?:more|larger|greater|bigger) than the (?:\d+ )?(?:maximum|max|limit)"
        r"|\bexceeds? the (?:maximum|limit)|checkout dirty|\bis out of sync with\b"), 60),
    ("pytest_location", re.compile(r"^(?P<file>[^\s:]+\.py):(?P<line>\d+): (?P<msg>[\w.]+(?:Error|Exception|Interrupt))$"), 30),
    ("glog_error", re.compile(r"^[EF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+:\d+\] (?P<msg>.*)"), 45),
    ("logging_error", re.compile(r"^(?:ERROR|CRITICAL|FATAL)(?::|\s+)[\w.]+:(?P<msg>.*)"), 35),
    ("generic_error", re.compile(r"^(?:error|fatal|Error|ERROR|FATAL|Fatal)(?:\[\w+\])?: (?P<msg>.*)"), 45),
    ("numerical", re.compile(r"Tensor-likes are not (?:close|equal)|[Mm]ismatched elements|not allclose|outputs? mismatch"), 55),
    ("problem", re.compile(
        r"(?i)\b(?:not supported|unsupported|timed? ?out|timeout|mismatch\w*|refused|unauthori[sz]ed|cannot|can't"
        r"|could not|unable to|not found|not equal|not close|exceed(?:ed|s)?|would be reformatted|invalid|abort(?:ed|ing)?"
        r"|offline)\b"), 36),
    ("failed_word", re.compile(r"\b(?:[Ff]ailed|FAILED|[Ee]rror|ERROR|[Ff]atal)\b"), 25),
]
_KIND_INDEX = {name: (pattern, score) for name, pattern, score in _KINDS}

_PYTEST_E = re.compile(r"^E {3,}(\S.*)$")
_EXIT_KINDS = frozenset({"gha_exit", "wrapper", "summary", "build_wrapper"})
_SECTION_BOUNDARY = re.compile(r"^={3,}(?: (?P<title>.*?) ={3,})?$")
_SECTION_KEEPS_TEST = re.compile(r"FAILURES|ERRORS|RERUNS")
_PENALTIES = [
    (re.compile(r"\batexit\b|Exception ignored in"), -30),
    (re.compile(r"^\[runner-container-hooks\]"), -15),
]
_BONUSES = [
    (re.compile(r"not authorized|AccessDenied|Access Denied|Permission denied|403 Forbidden"), 10),
    (re.compile(r"after \d+ (?:attempts|retries|tries)"), 15),  # a retry loop's final verdict
    (re.compile(r"\bsyntax error\b"), 5),
]


@functools.lru_cache(maxsize=16384)
def classify_line(line: str) -> LineInfo | None:
    """The kind and score of a cleaned line, or None when it says nothing about a failure.

    A pure function of the line, cached: CI logs repeat the same lines (warnings, retries, the
    same error per test) and a cached answer costs a dict look-up instead of forty regexes."""
    command = None
    content = line
    if line.startswith("##["):
        end = line.find("]")
        command, content = line[3:end], line[end + 1:]
        if command != "error":
            return None  # group/warning/notice markers are structure, not failures
    content = content[:MAX_CLASSIFY_CHARS]
    stripped = content.strip()
    if not stripped:
        return None
    boundary = _SECTION_BOUNDARY.match(stripped)
    if boundary:
        if _SECTION_KEEPS_TEST.search(boundary.group("title") or ""):
            return None
        info = _classify_boilerplate(stripped)
        return LineInfo("section", info.score if info else 0, message=stripped, ends_test=True)
    if _NOISE.search(content):
        return None
    pytest_e = _PYTEST_E.match(content)
    if pytest_e:  # pytest's `E   ` detail lines: judge what they say
        content = stripped = pytest_e.group(1)
    info = _classify_boilerplate(stripped) or _classify_kind(content, stripped)
    if info is None:
        if pytest_e:
            info = LineInfo("pytest_e", 40, message=stripped)
        elif command == "error":
            info = LineInfo("gha_error", 55, message=stripped)
        else:
            return None
    score = info.score
    if command == "error" and score < 55 and info.kind not in _EXIT_KINDS:
        score = 55  # GitHub's own error annotation outranks plain output
    if content[:2].isspace() and info.kind not in ("lint_error", "rate_limit"):
        score -= 8  # nested output of a tool (pip's subprocess box): the outer verdict names the unit
    for pattern, delta in _PENALTIES:
        if pattern.search(stripped):
            score += delta
    for pattern, delta in _BONUSES:
        if pattern.search(stripped):
            score += delta
    if score != info.score:
        info = LineInfo(info.kind, score, info.test, info.exception, info.message, info.frame, info.sets_test, info.ends_test)
    return info


def _classify_boilerplate(stripped: str) -> LineInfo | None:
    for pattern, score, kind in _BOILERPLATE:
        if pattern.search(stripped):
            return LineInfo(kind, score, message=stripped, ends_test=kind == "summary")
    return None


def _classify_kind(content: str, stripped: str) -> LineInfo | None:
    for name, pattern, score in _KINDS:
        match = pattern.search(stripped if name not in ("lint_error",) else content)
        if match:
            return _build(name, score, match, stripped)
    return None


def _build(kind: str, score: int, match: re.Match[str], stripped: str) -> LineInfo:
    groups = match.groupdict()
    test = groups.get("test") or groups.get("test2")
    message = groups.get("msg") or groups.get("msg2") or stripped
    exception = None
    frame = None
    if groups.get("file") and groups.get("line"):
        frame = (groups["file"], int(groups["line"]))
    if kind == "exception":
        exception, message = match.group(1), (match.group(2) or "").strip()
        short = exception.rsplit(".", 1)[-1]
        if short in GENERIC_EXCEPTIONS:
            score = 55
        elif short in STRONG_EXCEPTIONS:
            score = 72
        if not message:
            score -= 10
    elif kind == "pytest_summary" and message:
        inner = EXCEPTION_IN_TEXT_RE.match(message.strip())
        if inner:
            exception, message = inner.group(1), inner.group(2)
    elif kind == "unittest_header":  # Python 3.11 on names the method in the parentheses too
        cls = groups["cls"].removesuffix(f".{groups['name']}")
        test = f"{cls}.{groups['name']}"
    elif kind in ("test_file_failed", "test_file_signal") and stripped.startswith("RuntimeError"):
        exception = "RuntimeError"
    elif kind == "faulthandler_test_frame":
        test = f"{groups['file'].rsplit('/', 1)[-1]}::{groups['func']}"
    elif kind in ("lint_error", "flake8"):
        message = f"({groups['code']}) {groups['msg']}"
    elif kind == "probe_failure":
        message = f"[{groups['cat']}] {groups['msg']}"
    if exception is None and kind not in ("test_file_failed", "test_file_signal"):
        inner = EXCEPTION_IN_TEXT_RE.match(stripped)
        if inner:
            exception = inner.group(1)
            if message == stripped:
                message = inner.group(2)
    if kind.startswith("et_") or kind.startswith("qnn"):
        code = errors.find_error_code(message)
        if code is not None:
            message = f"{message} [{errors.describe(code)}]"
    # ctest's progress verdict comes before the test's output (`--output-on-failure`)
    sets_test = kind in ("pytest_section", "unittest_header", "gtest_run") or kind.startswith("ctest_") and bool(groups.get("test"))
    # `ctest -V` starts each test's output with its header: what follows is the next test's,
    # whose name comes only with its verdict, after it
    return LineInfo(kind, score, test, exception, message, frame, sets_test=sets_test, ends_test=kind == "ctest_header")


MAX_RAISED = 300


def raised(failure) -> str:
    """`exception: message` when the failure's primary line is its test's section header
    (`pytest_section`, `unittest_header`): Dr. CI's classifier marks that line in a pytest log
    without its summary line, and so does the engine, but it names the test, not the error, so
    the reports show what was raised beside it. "" otherwise, or when nothing raised is known."""
    message = " ".join(failure.message.split())
    line = failure.line.strip()
    if not failure.exception or not message or not any(
            _KIND_INDEX[kind][0].match(line) for kind in ("pytest_section", "unittest_header")):
        return ""
    return f"{failure.exception}: {message}"[:MAX_RAISED]
