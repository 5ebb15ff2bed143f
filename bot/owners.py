"""Who is cc'd on a pull request's new failures, and why.

Owners come from the repository's own CODEOWNERS, read from its default branch where GitHub
looks for it (`.github/CODEOWNERS`, `CODEOWNERS`, `docs/CODEOWNERS`, the first that exists;
triage_rules.codeowners reads it as GitHub does: the last matching line wins). Only a
repository without one (or whose file cannot be read) falls back to etriage's bundled table
(triage_rules/owners.yaml), and the comment says which it was.

The files looked up for a new failure, in this order: the changed files the pipeline points at
for it (its suspects), then the innermost frame of its traceback inside the repository; when
neither has an owner, the areas its rule and category name (triage_rules/categories.yaml). The
cc text names, per owner, the file and the CODEOWNERS line (number and pattern) that matched.

Failures are read by attribute (tasks.records.Verdict; bot never imports tasks).
"""
from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass
from typing import Callable

from bot import md
from triage_rules.codeowners import LOCATIONS, TEAM, USER, CodeOwners, normalise, parse
from triage_rules.decide import category_texts
from triage_rules.rules import owners_entry, rules_by_id

log = logging.getLogger(__name__)

MAX_OWNERS = 10  # handles mentioned in one comment
MAX_REASONS = 6  # "why" lines under the cc
SUSPECTS_LOOKED_UP = 3  # per failure, the top suspects (the comment shows as many)


@dataclass(frozen=True)
class Source:
    """Where ownership came from: the repository's CODEOWNERS (`codeowners`), or None for the
    bundled table with the reason (no file, or it could not be read)."""
    codeowners: CodeOwners | None
    fallback_reason: str = ""

    @property
    def name(self) -> str:
        return self.codeowners.path if self.codeowners else "bundled table"


@dataclass(frozen=True)
class Match:
    owners: tuple[str, ...]  # @handles only (e-mail owners cannot be mentioned)
    path: str  # repository-relative file looked up
    why: str  # how the failure points at the file, our words with `code` spans
    rule: str  # which line decided: "line 12 `/exir`" or "`/exir/`" (bundled)


def load_codeowners(read_file: Callable[[str], str | None]) -> Source:
    """The default branch's CODEOWNERS through `read_file(path)` (GitHubClient.read_file with
    ref=None; None: no such file). A read that fails is logged and means the bundled table."""
    for path in LOCATIONS:
        try:
            text = read_file(path)
        except UnicodeDecodeError:
            return Source(None, f"`{path}` is not UTF-8 text")
        except Exception as error:  # GitHub trouble: the comment still goes out, on the bundled table
            log.warning("%s could not be read: %s", path, error)
            return Source(None, f"`{path}` could not be read")
        if text is not None:
            owners = parse(text, path)
            for problem in owners.problems[:5]:
                log.info("%s:%d skipped (as GitHub does): %s", path, problem.line, problem.message)
            return Source(owners)
    return Source(None, "this repository has no CODEOWNERS")


class CodeOwnersCache:
    """Sources per repository for `ttl_seconds` (a worker reads CODEOWNERS once per few minutes)."""

    def __init__(self, ttl_seconds: float = 300.0, clock: Callable[[], float] = time.monotonic):
        self.ttl_seconds, self.clock = ttl_seconds, clock
        self._entries: dict[str, tuple[float, Source]] = {}
        self._lock = threading.Lock()

    def get(self, repo: str, read_file: Callable[[str], str | None]) -> Source:
        now = self.clock()
        with self._lock:
            entry = self._entries.get(repo)
        if entry and now < entry[0]:
            return entry[1]
        source = load_codeowners(read_file)
        with self._lock:
            self._entries[repo] = (now + self.ttl_seconds, source)
        return source


def repo_path(file: str) -> str | None:
    """A traceback frame's file as a path in the repository: an installed or checked-out
    `executorch/...` from there on, a relative path as it is; None for anything else (the
    interpreter's, another package's)."""
    probe = re.sub(r"^(?:\.\.\.|…)/", "", (file or "").replace("\\", "/"))  # a log's elided ".../backends/x.py"
    for marker in ("/site-packages/executorch/", "/executorch/"):
        at = probe.rfind(marker)
        if at >= 0:
            return normalise(probe[at + len(marker):]) or None
    if probe.startswith("/") or "site-packages/" in probe or probe.startswith("<") or ":" in probe[:3]:
        return None
    return normalise(probe) or None


_SOURCE_FILE = re.compile(r"^[\w.-]+(?:/[\w.-]+)*\.(?:py|pyi|cpp|cc|c|h|hpp|cmake|txt|yaml|yml|sh|bzl|toml|json|md)$")


def _handles(owners) -> tuple[str, ...]:
    return tuple(o for o in owners if USER.fullmatch(o) or TEAM.fullmatch(o))


def lookup(source: Source, path: str) -> tuple[tuple[str, ...], str] | None:
    """(owners, which line decided) for `path`, or None when nothing matches. A CODEOWNERS line
    without owners matches with no owners: GitHub's "unowned"."""
    if source.codeowners is not None:
        rule = source.codeowners.rule_for(path)
        if rule is None:
            return None
        return _handles(rule.owners), f"line {rule.line} {md.code(rule.pattern, 120)}"
    entry = owners_entry(path)
    return (_handles(entry[1]), md.code(entry[0], 120)) if entry else None


def _candidates(verdict):
    """(repository path, why) for one failure, most telling first."""
    test = md.code(verdict.test or verdict.suite, 120)
    for suspect in list(getattr(verdict, "suspects", ()) or ())[:SUSPECTS_LOOKED_UP]:
        path = normalise(suspect.path or "")
        if path:
            yield path, f"changed here, where to look for {test}"
    failure = getattr(verdict, "failure", None)
    for frame in reversed(list(getattr(failure, "frames", ()) or ())):
        path = repo_path(frame.file)
        if path:
            yield path, f"raised {test}'s error"
            break
    test_file = (verdict.test or "").split("::", 1)[0]
    if _SOURCE_FILE.match(test_file) and repo_path(test_file):
        yield repo_path(test_file), "the failing test's file" if "::" in (verdict.test or "") else "the file it failed on"


def _areas(verdict):
    """The areas the failure's rule and category name (`/exir/backend/`), as paths to look up."""
    failure = getattr(verdict, "failure", None)
    if failure is None:
        return
    rule = rules_by_id().get(failure.rule)
    entries = list(rule.owners if rule else ()) + list(category_texts().get(failure.category, {}).get("owners", []))
    for entry in dict.fromkeys(entries):
        if entry.startswith("/"):
            yield entry.strip("/") + "/", f"the area of {md.code(failure.category, 60)} failures"


def matches(source: Source, verdicts) -> list[Match]:
    """Per new failure, the first of its files that has owners (then its areas), each file once."""
    found: list[Match] = []
    seen: set[str] = set()
    for verdict in verdicts:
        if verdict.verdict != "new":
            continue
        for candidates in (_candidates(verdict), _areas(verdict)):
            hit = None
            for path, why in candidates:
                decided = lookup(source, path)
                if decided and decided[0]:
                    hit = Match(decided[0], path, why, decided[1])
                    break
            if hit:
                if hit.path not in seen:
                    seen.add(hit.path)
                    found.append(hit)
                break
    return found


CC_MARKER = "<!-- etriage:cc -->"


def cc_text(source: Source, verdicts) -> str:
    """The cc block of a comment section: who is mentioned and, per file, which line of which
    file made them owners. Empty when no new failure has an owner."""
    found = matches(source, verdicts)
    handles = list(dict.fromkeys(h for m in found for h in m.owners))
    if not handles:
        return ""
    shown, rest = handles[:MAX_OWNERS], len(handles) - MAX_OWNERS
    if source.codeowners is not None:
        origin = f"from {md.code(source.codeowners.path)} on the default branch"
    else:
        origin = f"from etriage's bundled table: {md.prose(source.fallback_reason, 200)}"
    lines = [CC_MARKER, f"**cc** {' '.join(shown)}" + (f" and {rest} more" if rest > 0 else "") + f" ({origin})"]
    for match in found[:MAX_REASONS]:
        owners = " ".join(h for h in match.owners if h in shown) or "(owners above)"
        lines.append(f"- {owners}: {md.code(match.path, 200)} ({match.why}) matched {match.rule}")
    if len(found) > MAX_REASONS:
        lines.append(f"- and {len(found) - MAX_REASONS} more file(s)")
    return "\n".join(lines)


def with_cc(section: str, cc: str) -> str:
    """A comment section with its cc block (replacing one it had: republishing never stacks them)."""
    base = section.split("\n" + CC_MARKER, 1)[0].rstrip()
    return f"{base}\n\n{cc}" if cc else base
