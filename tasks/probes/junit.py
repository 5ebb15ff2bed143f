"""JUnit XML for probe results, so the pipeline reads outcomes from a file, not exit codes."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from tasks.probes.records import ProbeResult

SUITE_NAME = "etriage.probes"
# what XML 1.0 cannot carry at all (ElementTree writes it anyway, and no parser reads it back)
NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(text: str) -> str:
    """`text` with each character XML cannot hold written as its escape (`\\x1b`): a probe's
    message quotes the module under test, and one control byte there must not cost the file."""
    return NOT_XML.sub(lambda m: m.group().encode("unicode_escape").decode(), text)


def to_junit(results: list[ProbeResult]) -> bytes:
    counts = {o: sum(r.outcome == o for r in results) for o in ("failed", "error", "skipped")}
    suite = ET.Element(
        "testsuite",
        name=SUITE_NAME,
        tests=str(len(results)),
        failures=str(counts["failed"]),
        errors=str(counts["error"]),
        skipped=str(counts["skipped"]),
        time=f"{sum(r.duration for r in results):.3f}",
    )
    for r in results:
        case = ET.SubElement(
            suite, "testcase", classname=xml_text(f"probes.{r.suite}"), name=xml_text(r.name),
            file=xml_text(r.module), time=f"{r.duration:.3f}"
        )
        tag = {"failed": "failure", "error": "error", "skipped": "skipped"}.get(r.outcome)
        if tag:
            element = ET.SubElement(case, tag, message=xml_text(r.message))
            element.text = xml_text(r.diagnosis)
    return ET.tostring(suite, encoding="utf-8", xml_declaration=True)


def write_junit(results: list[ProbeResult], path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(to_junit(results))
