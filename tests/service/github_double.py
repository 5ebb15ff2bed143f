"""The GitHub double for the service tests. Its server lives in etriage/dev/github_double.py (so that
`etriage serve --github-double` and `etriage demo` can use it on an installed copy); this module
adds what only tests need: real CI logs with their fixture markers removed."""
from __future__ import annotations

from pathlib import Path

from etriage.demo import log_text
from etriage.dev.github_double import GitHubDouble, Hold, Recorded

# The tests read the originals in shared/ (beside the clone), not the package's copies.
SHARED_LOGS = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "logs" / "pytorch-log-classifier"

__all__ = ["GitHubDouble", "Hold", "Recorded", "ci_log", "marked_line"]


def marked_line(name: str) -> str:
    """The line the log's maintainers marked as the failure (`#=MATCH=# `), markers removed."""
    raw = (SHARED_LOGS / name).read_text()
    line = next(line for line in raw.splitlines() if line.startswith("#=MATCH=# "))
    return line.removeprefix("#=MATCH=# ").replace("‹", "").replace("›", "")


def ci_log(name: str) -> str:
    """A real CI log from shared/fixtures, markers removed."""
    return log_text(name, SHARED_LOGS)
