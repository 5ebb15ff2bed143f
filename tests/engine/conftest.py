"""Engine test helpers: the PyTorch log match rate is reported in the terminal summary."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from triage_rules.readers import clean_line

MATCH_REPORT: list[str] = []


@pytest.fixture
def match_report() -> list[str]:
    """Lines that the terminal summary prints (match rate and misses)."""
    return MATCH_REPORT


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if MATCH_REPORT:
        terminalreporter.section("etriage failure extraction")
        for line in MATCH_REPORT:
            terminalreporter.write_line(line)



FIXTURE_DIR = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "logs" / "pytorch-log-classifier"
SOURCE_PREFIX = "#=SOURCE=#"
MATCH_PREFIX = "#=MATCH=# "


@dataclass(frozen=True)
class MarkedLog:
    name: str
    text: str  # the log as CI produced it (markers removed)
    line_no: int  # 1-based number of the marked line in `text`
    line: str  # the marked line, cleaned (no timestamp, no ANSI codes)
    key: str  # the part between ‹ › (the grouping key)


def load_marked_logs(directory: Path = FIXTURE_DIR) -> list[MarkedLog]:
    logs = []
    for path in sorted(directory.glob("*.txt")):
        lines = path.read_text(encoding="utf-8").split("\n")
        if lines and lines[0].startswith(SOURCE_PREFIX):
            lines = lines[1:]
        marked = None
        for index, line in enumerate(lines):
            if line.startswith(MATCH_PREFIX):
                raw = line[len(MATCH_PREFIX):]
                key = raw[raw.find("‹") + 1:raw.find("›")]
                lines[index] = raw.replace("‹", "").replace("›", "")
                marked = (index + 1, lines[index], key)
        assert marked is not None, f"{path.name} has no {MATCH_PREFIX!r} line"
        logs.append(MarkedLog(path.stem, "\n".join(lines), marked[0], clean_line(marked[1]), marked[2]))
    return logs


@pytest.fixture(scope="session")
def marked_logs() -> list[MarkedLog]:
    logs = load_marked_logs()
    if not logs:
        pytest.fail(f"no marked logs under {FIXTURE_DIR}")
    return logs
