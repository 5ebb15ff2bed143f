"""The GitHub double for the service tests. Its server lives in bot/github_double.py (so that
`etriage serve --github-double` and `etriage demo` can use it on an installed copy); this module
adds what only tests need: real CI logs with their fixture markers removed."""
from __future__ import annotations

from bot.demo import log_text as ci_log
from bot.github_double import GitHubDouble, Hold, Recorded

__all__ = ["GitHubDouble", "Hold", "Recorded", "ci_log", "marked_line"]


def marked_line(name: str) -> str:
    """The line the log's maintainers marked as the failure (`#=MATCH=# `), markers removed."""
    from bot.demo import fixtures_root

    raw = (fixtures_root() / "logs" / "pytorch-log-classifier" / name).read_text()
    line = next(line for line in raw.splitlines() if line.startswith("#=MATCH=# "))
    return line.removeprefix("#=MATCH=# ").replace("‹", "").replace("›", "")
