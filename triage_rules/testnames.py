"""The failing test's own names, taken out of the text that rules and structural signals read.

A test's name says what it guards (`test_create_mutable_buffer_*`, `test_to_backend_multi_method`):
that is evidence, weighed once, as the test's area (decide.AREA_WEIGHT). Read again by a rule or
a signal in the summary line, the section header or a frame, it would count twice and name a
mechanism the failure never showed: an import error in a mutable-buffer test is no "buffer
mutation lost from the graph signature". So rules and signals read the failure's lines with
those names replaced by `<test>`, and test files in a traceback's frames by `<test file>`.
"""
from __future__ import annotations

import re

# A test's name in a log: a pytest section header's, a unittest header's, a node id's parts.
_NAMED_TEST = re.compile(r"^_{3,} (?:(?:ERROR|FAILURE) (?:at \w+ of |collecting ))?(?P<test>\S+) _{3,}$"
                         r"|^(?:FAIL|ERROR)(?: \[[\d.]+s\])?: (?P<name>test\w*) \((?P<cls>[\w.]+)\)")
MIN_NAME = 6  # shorter parts of a test's name are left alone ("test", "T", "run")
# a name (or a path's last part) that names a test: test_x, TestX, x_test, XTest, XTests
_A_TEST = re.compile(r"(?:^|[/.:])(?:[Tt]est\w*|\w+_test|\w+Tests?)(?:\.py)?(?:\[[^\]]*\])?$")
# a test file in a traceback's frame (pytest's `path.py:12: in name`, Python's `File "path.py",
# line 12`), by pytest's and unittest's naming (`test_*.py`, `*_test.py`); not a linter's or a
# compiler's `path.py:12:3:`, where the file is what the finding is about
_TEST_FRAME = re.compile(r"[\w./\\-]*\b(?:test_\w+|\w+_test)\.py(?=:\d+: in |\", line \d)")


def test_names(test: str, *lines: str) -> tuple[str, ...]:
    """The failing test's names as a log spells them: its node id, its file (path, file name,
    module name), its class and function (a parametrised one also without its id), and those
    of the section headers among `lines`; only parts that name a test (`test*`, `Test*`,
    `*_test`, `*Test(s)`), never a folder or package (`backends`); longest first."""
    names = {test}
    for line in lines:
        found = _NAMED_TEST.match(line.strip())
        if found:
            names |= {found.group("test") or "", found.group("name") or "", found.group("cls") or ""}
    for name in list(names):
        file, _, rest = name.partition("::")
        parts = rest.split("::") if rest else ([] if file.endswith(".py") else name.split("."))
        base = file.rsplit("/", 1)[-1]
        names |= {file, base, base.removesuffix(".py"), *parts}
    names |= {n.split("[", 1)[0] for n in names}
    return tuple(sorted((n for n in names if len(n) >= MIN_NAME and _A_TEST.search(n)), key=len, reverse=True))


def without_names(line: str, names: tuple[str, ...]) -> str:
    """`line` with the failing test's names replaced by `<test>`: rules read what failed, not
    what the test is called (`test_create_mutable_buffer_x` failing on an import is no buffer
    mutation lost); the test's area is weighed apart, once (decide.AREA_WEIGHT)."""
    for name in names:
        if name in line:
            line = line.replace(name, "<test>")
    return _TEST_FRAME.sub("<test file>", line)


def is_test_file(path: str) -> bool:
    """Whether `path` is a test file by pytest's and unittest's naming (`test_*.py`, `*_test.py`)."""
    return bool(re.fullmatch(r"(?:test_\w+|\w+_test)\.py", path.replace("\\", "/").rsplit("/", 1)[-1]))
