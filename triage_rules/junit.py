"""JUnit XML (pytest `--junit-xml`, nested `<testsuites>`) into typed test cases.

Parsed with expat so every case keeps the line it sits on in the XML (a failure's line
number points into the input), and malformed XML is a clear JUnitError, not a traceback.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from xml.parsers import expat

OUTCOME_TAGS = {"failure": "failed", "error": "error", "skipped": "skipped"}
# A failed test beats an errored teardown beats a skip when one case carries several.
_OUTCOME_RANK = {"passed": 0, "skipped": 1, "error": 2, "failed": 3}


class JUnitError(ValueError):
    """The input is not readable JUnit XML."""


@dataclass
class JUnitCase:
    classname: str
    name: str
    file: str | None
    outcome: str  # "passed" | "failed" | "error" | "skipped"
    message: str = ""
    text: str = ""
    time: float = 0.0
    line_no: int = 0  # line of the <failure>/<error> element (or the <testcase>) in the XML

    @property
    def test_id(self) -> str:
        """pytest-style `path::Class::name` when the file is known, else `classname.name`."""
        if not self.file:
            return f"{self.classname}.{self.name}" if self.classname else self.name
        module = self.file[:-3] if self.file.endswith(".py") else self.file
        module = module.replace("/", ".").replace("\\", ".")
        rest = self.classname
        if rest == module:
            rest = ""
        elif rest.startswith(module + "."):
            rest = rest[len(module) + 1:]
        elif "." in rest:
            rest = rest.rsplit(".", 1)[-1] if rest.rsplit(".", 1)[-1][:1].isupper() else ""
        parts = [self.file, *rest.split("."), self.name] if rest else [self.file, self.name]
        return "::".join(p for p in parts if p)


def read_junit(source: str | os.PathLike) -> list[JUnitCase]:
    """All test cases in a JUnit XML file (a path) or XML string."""
    if isinstance(source, os.PathLike) or (isinstance(source, str) and not source.lstrip().startswith("<")):
        try:
            with open(source, "rb") as stream:
                data = stream.read()
        except OSError as exc:
            raise JUnitError(f"{source}: {exc.strerror or exc}") from None
    else:
        data = source.encode("utf-8")
    return _parse(data)


def _parse(data: bytes) -> list[JUnitCase]:
    cases: list[JUnitCase] = []
    stack: list[str] = []
    state: dict = {"case": None, "capture": None, "saw_suite": False}
    parser = expat.ParserCreate()

    def start(tag: str, attrs: dict[str, str]) -> None:
        stack.append(tag)
        if tag in ("testsuite", "testsuites"):
            state["saw_suite"] = True
        elif tag == "testcase":
            state["case"] = JUnitCase(
                classname=attrs.get("classname", ""),
                name=attrs.get("name", ""),
                file=attrs.get("file") or None,
                outcome="passed",
                time=_float(attrs.get("time")),
                line_no=parser.CurrentLineNumber,
            )
        elif tag in OUTCOME_TAGS and state["case"] is not None:
            case = state["case"]
            outcome = OUTCOME_TAGS[tag]
            if _OUTCOME_RANK[outcome] > _OUTCOME_RANK[case.outcome]:
                case.outcome = outcome
                case.message = attrs.get("message", "")
                case.text = ""
                case.line_no = parser.CurrentLineNumber
                state["capture"] = tag
            else:
                state["capture"] = None

    def end(tag: str) -> None:
        stack.pop()
        if tag == "testcase" and state["case"] is not None:
            cases.append(state["case"])
            state["case"] = None
        elif tag == state["capture"]:
            state["capture"] = None

    def chars(text: str) -> None:
        if state["capture"] and state["case"] is not None and stack and stack[-1] == state["capture"]:
            state["case"].text += text

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = chars
    try:
        parser.Parse(data, True)
    except expat.ExpatError as exc:
        raise JUnitError(f"malformed JUnit XML at line {exc.lineno}, column {exc.offset}: {expat.errors.messages[exc.code]}") from None
    if not state["saw_suite"]:
        raise JUnitError("not JUnit XML: no <testsuite> or <testsuites> element")
    return cases


def _float(value: str | None) -> float:
    try:
        return float(value) if value else 0.0
    except ValueError:
        return 0.0
