"""Trunk red: one GitHub issue per failure cluster that keeps failing on the branch PRs target.

After a failed CI run on trunk is classified and recorded (bot.history: its failures joined
the dashboard's clusters), `record_trunk_run` counts, per cluster of that run, the trunk
commits it has failed on since its issue was last closed (or ever). At `trunk_issues.after`
commits (`.github/etriage.yml`, default 3) the cluster's issue is opened; on each later red
commit it is updated (count, commits, jobs), never opened twice: it is found again by the
number the store keeps and, failing that, by its hidden marker among the bot's issues with
the configured label (bot.github_client.upsert_issue). A closed one is reopened.

Trunk is green again for a cluster when a later trunk run has every job the cluster failed in
and all of them passed: the issue gets a comment saying at which commit, and is closed; the
count starts again from then (`close_when_green: false` leaves issues to people).

What does not count: a failure a maintainer muted (bot.mutes; its verdict is `ignored`) and one
the engine put on the environment (runner, SDK, device: not trunk's code). Failures are read
by attribute (tasks.records.Verdict; bot never imports tasks).
"""
from __future__ import annotations

import logging
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone

from sqlalchemy import func, select

from bot import md
from bot.history import TRUNK, History
from bot.owners import Source, cc_text

log = logging.getLogger(__name__)

NOT_COUNTED = frozenset({"ignored", "environment", "flaky", "fixed"})
COMMITS_SHOWN = 10
MARKER = "<!-- etriage:trunk-red {cluster} -->"


@dataclass
class TrunkRun:
    """What one classified CI run on trunk saw."""
    repo: str
    sha: str
    branch: str
    failed_jobs: list[str]
    passed_jobs: list[str]
    verdicts: list = field(default_factory=list)  # tasks.records.Verdict, mutes applied


def marker(cluster_id: str) -> str:
    return MARKER.format(cluster=cluster_id)


def red_commits(history: History, repo: str, cluster_id: str, since: datetime | None) -> list[tuple[str, datetime]]:
    """(sha, when) of the trunk commits the cluster failed on after `since`, newest first."""
    f = history.t["failure_events"]
    query = (select(f.c.sha, func.max(f.c.at).label("at"))
             .where(f.c.repo == repo, f.c.pr == TRUNK, f.c.cluster_id == cluster_id,
                    f.c.verdict.not_in(NOT_COUNTED))
             .group_by(f.c.sha).order_by(func.max(f.c.at).desc()))
    if since is not None:
        query = query.where(f.c.at > since)
    with history.engine.connect() as conn:
        return [(row.sha, _utc(row.at)) for row in conn.execute(query)]


def record_trunk_run(store, gh, run: TrunkRun, config, *, owners: Source | None = None,
                     public_url: str = "", now: datetime | None = None) -> list[str]:
    """Open, update or close the trunk issues this run calls for; what was done, in words."""
    now = now or datetime.now(timezone.utc)
    history = History(store)
    failing = [v for v in run.verdicts if v.failure is not None
               and (v.verdict not in NOT_COUNTED or v.verdict == "ignored")]
    clusters = history.clusters_of([(v.primary_line, v.fingerprint) for v in failing]) if failing else []
    by_cluster: dict[str, list] = defaultdict(list)
    for verdict, cluster_id in zip(failing, clusters):
        if cluster_id:
            by_cluster[cluster_id].append(verdict)
    done = []
    for cluster_id, verdicts in sorted(by_cluster.items()):
        row = store.trunk_issue(run.repo, cluster_id) or {}
        counted = [v for v in verdicts if v.verdict != "ignored"]  # all ignored: the cluster is muted
        commits = red_commits(history, run.repo, cluster_id, row.get("since"))
        jobs = sorted(set(row.get("jobs") or []) | {v.suite for v in verdicts})
        values = dict(red_count=len(commits), last_sha=run.sha, last_red_at=now, jobs=jobs,
                      since=row.get("since"), state=row.get("state") or "none")
        if not counted:
            done.append(f"{cluster_id} red on trunk but muted: not counted")
        elif len(commits) >= config.after:
            verdicts = counted
            body = issue_body(cluster_id, verdicts, commits, jobs, config, run, owners=owners, public_url=public_url)
            number, what = gh.upsert_issue(run.repo, marker(cluster_id), title=issue_title(verdicts[0]),
                                           body=body, label=config.label, number=row.get("number"))
            reopened = row.get("state") != "open"
            values.update(number=number, state="open", opened_at=now if reopened else row.get("opened_at"))
            done.append(f"trunk issue #{number} {what} ({cluster_id}, red on {len(commits)} commit(s))")
        store.save_trunk_issue(run.repo, cluster_id, **values)
    if config.close_when_green:
        done += _close_green(store, gh, run, set(by_cluster), now)
    return done


def _close_green(store, gh, run: TrunkRun, still_red: set[str], now: datetime) -> list[str]:
    """Close the open issues whose every job passed in this run (and whose cluster did not fail)."""
    passed, done = set(run.passed_jobs), []
    for row in store.trunk_issues(run.repo, state="open"):
        jobs = set(row.get("jobs") or [])
        if row["cluster_id"] in still_red or not jobs or not jobs <= passed:
            continue
        cluster_id = row["cluster_id"]
        said = (f"<!-- etriage:trunk-green {cluster_id} {run.sha[:40]} -->\n"
                f"Trunk is green again for this failure: at {md.code(run.sha[:12])} on {md.code(run.branch, 100)} "
                f"every job it failed in passed ({', '.join(md.code(j, 120) for j in sorted(jobs))}). "
                "Closing; etriage reopens this issue if it comes back.")
        closed = gh.close_issue(run.repo, row["number"], marker(cluster_id), said)
        store.save_trunk_issue(run.repo, cluster_id, state="closed", closed_at=now, since=now, red_count=0, jobs=[])
        done.append(f"trunk issue #{row['number']} {'closed' if closed else 'was closed already'} ({cluster_id})")
    return done


_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def issue_title(verdict) -> str:
    """Plain text (a title renders no markdown): the category and the primary line, bounded."""
    line = " ".join(_CONTROL.sub(" ", verdict.primary_line or verdict.test or "").split())
    title = f"Trunk red: {verdict.category}: {line}"
    return title if len(title) <= 120 else title[:119] + "…"


def issue_body(cluster_id: str, verdicts, commits, jobs, config, run: TrunkRun, *,
               owners: Source | None = None, public_url: str = "") -> str:
    sample = verdicts[0]
    failure = sample.failure
    since = commits[-1][1] if commits else None
    lines = [marker(cluster_id),
             f"**Trunk has been red with this failure on {len(commits)} commit(s)**"
             + (f" since {since:%Y-%m-%d %H:%M} UTC" if since else "")
             + f" (this issue opens at {config.after}: `trunk_issues.after` in `.github/etriage.yml`).", "",
             f"- Cluster: {md.code(cluster_id)}"
             + (f" ([dashboard]({public_url}/dashboard/clusters/{cluster_id}))" if _plain_url(public_url) else ""),
             f"- Category: {sample.category_words}",
             f"- Jobs: {', '.join(md.code(j, 120) for j in jobs[:10])}" + (f" and {len(jobs) - 10} more" if len(jobs) > 10 else ""),
             "- Commits, newest first: " + ", ".join(f"{md.code(sha[:12])} ({at:%Y-%m-%d %H:%M})"
                                                      for sha, at in commits[:COMMITS_SHOWN])
             + (f" and {len(commits) - COMMITS_SHOWN} more" if len(commits) > COMMITS_SHOWN else "")]
    tests = list(dict.fromkeys(v.test for v in verdicts if v.test))
    if tests:
        lines.append(f"- Tests: {', '.join(md.code(t) for t in tests[:5])}" + (f" and {len(tests) - 5} more" if len(tests) > 5 else ""))
    lines += ["", "Primary line:", md.block(sample.primary_line.strip(), limit=1000, keep="head")]
    if failure.explanation:
        lines += ["", md.prose(failure.explanation.strip())]
    if owners is not None:
        cc = cc_text(owners, [v for v in verdicts if v.verdict == "new"])
        if cc:
            lines += ["", cc]
    lines += ["", f"While it is being fixed, a maintainer can mute it repo-wide, so pull requests stop "
                  f"counting it as theirs: comment `/etriage mute cluster {cluster_id} for 7d because <reason>` "
                  "on a pull request, or use the dashboard's mutes page."
              + (" etriage closes this issue when its jobs pass on trunk again." if config.close_when_green else "")]
    return "\n".join(lines) + "\n"


_URL = re.compile(r"https?://[A-Za-z0-9.:/_-]{1,200}")


def _plain_url(url: str) -> bool:
    return bool(url) and _URL.fullmatch(url) is not None


def _utc(moment):
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
