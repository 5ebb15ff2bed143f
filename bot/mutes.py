"""Mutes: a test or a failure cluster set aside repo-wide for a time, by a maintainer, with a reason.

PyTorch keeps a known-flaky test off everyone's back with a DISABLED issue; here a maintainer
writes `/etriage mute test <test id> for 7d because <reason>` (or `mute cluster <id> ...`, a
cluster of the dashboard), or fills the dashboard's form. Until it expires (or is lifted), a
failure it covers is still shown on the comment and the dashboard, marked muted with who, until
when and why, but it is not a new failure: it is not counted, it does not fail the check run
and it does not open a trunk issue. An expired mute applies to nothing from then on.

The store keeps the rows (`mutes`, migration 0005); this module holds the rules: what a key and
a duration may be, and which failures of a run a repository's mutes cover. Failures are read
by attribute (tasks.records.Verdict; bot never imports tasks).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from sqlalchemy import select

from bot.history import History

KINDS = ("test", "cluster")
CLUSTER_ID = re.compile(r"^c[0-9a-f]{11}$")  # triage_rules.cluster.cluster_id
MAX_KEY_CHARS = 500  # the store's column
MAX_REASON_CHARS = 500
MIN_DURATION = timedelta(minutes=5)
MAX_DURATION = timedelta(days=90)  # a mute must come up for review again
_UNITS = {"m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
          "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
          "d": 86400, "day": 86400, "days": 86400, "w": 604800, "week": 604800, "weeks": 604800}
_DURATION = re.compile(r"^(\d{1,4})\s*([a-z]+)$")


class MuteError(ValueError):
    """A key, duration or reason that cannot make a mute. The message says what would; for a key
    or a duration it is a predicate of the value, which the caller shows first, escaped its way
    (a reply through command_grammar.shown, a page through Jinja): `'xyz' is not a duration`."""


def parse_duration(text: str) -> timedelta:
    """"30m", "12h", "7d", "2w", "7 days", "1 week" -> a timedelta between MIN and MAX_DURATION."""
    found = _DURATION.match(" ".join(text.lower().split()))
    if not found or found.group(2) not in _UNITS:
        raise MuteError("is not a duration; write a number and a unit: 30m, 12h, 7d or 2w")
    duration = timedelta(seconds=int(found.group(1)) * _UNITS[found.group(2)])
    if not MIN_DURATION <= duration <= MAX_DURATION:
        raise MuteError(f"is out of range: a mute lasts between {_words(MIN_DURATION)} and "
                        f"{_words(MAX_DURATION)}; mute again when it runs out")
    return duration


def check_key(kind: str, key: str) -> str:
    """The key of a mute of `kind`, or MuteError: a cluster id as the dashboard shows it, or a
    test id (one line, printable, bounded)."""
    if kind not in KINDS:
        raise MuteError("is neither `test` nor `cluster`")
    if kind == "cluster" and not CLUSTER_ID.match(key):
        raise MuteError("is not a cluster id (like c0123456789a: the dashboard's cluster page shows it)")
    if not key or len(key) > MAX_KEY_CHARS or not key.isprintable() or key != key.strip():
        raise MuteError(f"is not a test id (one line of at most {MAX_KEY_CHARS} printable characters)")
    return key


def check_reason(reason: str) -> str:
    reason = " ".join((reason or "").split())
    if not reason:
        raise MuteError("say why the mute is there (`because ...`): the next maintainer reads it")
    if len(reason) > MAX_REASON_CHARS:
        raise MuteError(f"the reason is longer than {MAX_REASON_CHARS} characters")
    return reason


def _words(duration: timedelta) -> str:
    seconds = int(duration.total_seconds())
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            n = seconds // size
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{seconds} seconds"


def when(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


@dataclass(frozen=True)
class Mute:
    id: int
    repo: str
    kind: str
    key: str
    reason: str
    muted_by: str
    until: datetime
    source: str = ""

    @classmethod
    def from_row(cls, row: dict) -> "Mute":
        return cls(row["id"], row["repo"], row["kind"], row["key"], row["reason"], row["muted_by"] or "",
                   row["until"], row.get("source") or "")

    def describe(self) -> str:
        """Plain words (the renderers escape them): shown where the failure would have counted."""
        return (f"muted repo-wide ({self.kind} {self.key}) by {self.muted_by or 'a maintainer'} "
                f"until {when(self.until)}: {self.reason}")


def active(store, repo: str, now: datetime | None = None) -> list[Mute]:
    """The repository's mutes in force at `now` (default: now): not expired, not lifted."""
    return [Mute.from_row(row) for row in store.mutes(repo, active_at=now or datetime.now(timezone.utc))]


def covered(mutes: list[Mute], verdicts, clusters_of) -> dict[str, str]:
    """{fingerprint or test id: why it is muted} for the verdicts `mutes` cover, in the shape
    of the per-PR ignores (tasks.pipeline.compare.apply_ignores). `clusters_of` maps [(primary
    line, fingerprint)] to cluster ids (bot.history.History.clusters_of); it is asked only when
    a cluster is muted."""
    by_test = {m.key: m for m in mutes if m.kind == "test"}
    by_cluster = {m.key: m for m in mutes if m.kind == "cluster"}
    verdicts = list(verdicts)
    found: dict[str, str] = {}
    for verdict in verdicts:
        mute = by_test.get(verdict.test) if verdict.test else None
        if mute:
            found[verdict.test] = mute.describe()
    if by_cluster and verdicts:
        failures = [(v.primary_line, v.failure.fingerprint if v.failure else "") for v in verdicts]
        for verdict, (line, fingerprint), cluster in zip(verdicts, failures, clusters_of(failures)):
            mute = by_cluster.get(cluster) if cluster else None
            if mute and fingerprint:
                found.setdefault(fingerprint, mute.describe())
    return found


def known_cluster(store, cluster_id: str) -> dict | None:
    """The dashboard's cluster row of that id (bot.history), or None."""
    clusters = History(store).t["clusters"]
    with store.engine.connect() as conn:
        row = conn.execute(select(clusters.c.id, clusters.c.title, clusters.c.category)
                           .where(clusters.c.id == cluster_id)).mappings().first()
    return dict(row) if row else None
