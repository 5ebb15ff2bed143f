"""JUnit XML for probe results, so the pipeline reads outcomes from a file, not exit codes."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from tasks.probes.records import ProbeResult

SUITE_NAME = "etriage.probes"


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
            suite, "testcase", classname=f"probes.{r.suite}", name=r.name, file=r.module, time=f"{r.duration:.3f}"
        )
        tag = {"failed": "failure", "error": "error", "skipped": "skipped"}.get(r.outcome)
        if tag:
            element = ET.SubElement(case, tag, message=r.message)
            element.text = r.diagnosis
    return ET.tostring(suite, encoding="utf-8", xml_declaration=True)


def write_junit(results: list[ProbeResult], path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(to_junit(results))
