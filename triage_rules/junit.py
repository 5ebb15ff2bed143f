"""JUnit XML (pytest `--junit-xml`, nested `<testsuites>`) into typed test cases.

A run's JUnit file is written by the code under test, so it is hostile input: parsed with
defusedxml's expat reader (no DTD entities, no external references: an entity bomb is refused,
not expanded), refused above MAX_BYTES before any parsing, and each failure's text gathered in a
list and joined once (expat hands character data over line by line; `+=` per line made a 13 MB
body quadratic). Every case keeps the line it sits on in the XML (a failure's line number points
into the input), and malformed XML (one control byte) is a clear JUnitError, not a traceback.
"""
from __future__ import annotations

import io
import os
from dataclasses import dataclass
from xml.sax import SAXParseException
from xml.sax.handler import ContentHandler, feature_external_ges, feature_external_pes

from defusedxml import DefusedXmlException
from defusedxml.sax import make_parser

MAX_BYTES = 64 << 20  # a JUnit file above this is not read at all (a run may write 2 GiB)
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
                size = os.fstat(stream.fileno()).st_size
                if size > MAX_BYTES:
                    raise JUnitError(f"JUnit XML of {size / (1 << 20):.0f} MiB, over the {MAX_BYTES >> 20} MiB "
                                     "that are read")
                data = stream.read(MAX_BYTES + 1)
        except OSError as exc:
            raise JUnitError(f"{source}: {exc.strerror or exc}") from None
    else:
        data = source.encode("utf-8")
    if len(data) > MAX_BYTES:
        raise JUnitError(f"JUnit XML of {len(data) / (1 << 20):.0f} MiB, over the {MAX_BYTES >> 20} MiB that are read")
    return _parse(data)


class _Cases(ContentHandler):
    def __init__(self) -> None:
        super().__init__()
        self.cases: list[JUnitCase] = []
        self.stack: list[str] = []
        self.case: JUnitCase | None = None
        self.capture: str | None = None
        self.text: list[str] = []  # the captured element's character data, joined once at its end
        self.saw_suite = False

    def _line(self) -> int:
        return self._locator.getLineNumber() if self._locator else 0

    def startElement(self, tag, attrs) -> None:
        self.stack.append(tag)
        if tag in ("testsuite", "testsuites"):
            self.saw_suite = True
        elif tag == "testcase":
            self.case = JUnitCase(classname=attrs.get("classname", ""), name=attrs.get("name", ""),
                                  file=attrs.get("file") or None, outcome="passed",
                                  time=_float(attrs.get("time")), line_no=self._line())
        elif tag in OUTCOME_TAGS and self.case is not None:
            outcome = OUTCOME_TAGS[tag]
            if _OUTCOME_RANK[outcome] > _OUTCOME_RANK[self.case.outcome]:
                self.case.outcome, self.case.message = outcome, attrs.get("message", "")
                self.case.text, self.case.line_no = "", self._line()
                self.capture, self.text = tag, []
            else:
                self.capture = None

    def endElement(self, tag) -> None:
        self.stack.pop()
        if tag == "testcase" and self.case is not None:
            self.cases.append(self.case)
            self.case = None
        elif tag == self.capture:
            if self.case is not None:
                self.case.text = "".join(self.text)
            self.capture, self.text = None, []

    def characters(self, text) -> None:
        if self.capture and self.case is not None and self.stack and self.stack[-1] == self.capture:
            self.text.append(text)


def _parse(data: bytes) -> list[JUnitCase]:
    handler = _Cases()
    parser = make_parser()  # defusedxml's: entities and DTD-driven expansion forbidden
    parser.setFeature(feature_external_ges, False)
    parser.setFeature(feature_external_pes, False)
    parser.setContentHandler(handler)
    try:
        parser.parse(io.BytesIO(data))
    except SAXParseException as exc:
        raise JUnitError(f"malformed JUnit XML at line {exc.getLineNumber()}, column {exc.getColumnNumber()}: "
                         f"{exc.getMessage()}") from None
    except DefusedXmlException as exc:
        raise JUnitError(f"refused JUnit XML: {exc}") from None
    if not handler.saw_suite:
        raise JUnitError("not JUnit XML: no <testsuite> or <testsuites> element")
    return handler.cases


def _float(value: str | None) -> float:
    try:
        return float(value) if value else 0.0
    except ValueError:
        return 0.0
