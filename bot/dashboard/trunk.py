"""Trunk now: is it red, since which commit, which tests on which targets; and the commits x jobs
grid under it (HUD's main view). A job is a suite on a target, as the results record it (the
bot's own suites, and a CI job recorded as its suite on its runner).

A cell's state, from its results and the verdicts of its failures:
- `red`: a test failed and the failure is the code's (new or pre-existing, or no verdict);
- `environment`: every failure there is the environment's (SDK, device, runner);
- `flaky`: a test failed and passed on retry, nothing red;
- `green`: everything that ran passed (or was skipped).

A test is failing on trunk now when its newest result on trunk failed (red). It is red since
the oldest commit of that streak: walking back over the commits where it ran, up to the first
where it passed (its last green commit). When the window ends before a pass, `since_exact` is
false and `since` is the oldest commit seen.
"""
from __future__ import annotations

from sqlalchemy import and_, func, select

from bot.history import TRUNK

NOT_RED = {"environment", "flaky", "ignored", "fixed"}  # verdicts that do not make trunk red
STATE_ORDER = ("red", "environment", "flaky", "green")
WINDOW = 60  # trunk runs read back for the streaks (commits shown in the grid: `commits`)


def cell_state(outcomes: dict[tuple[str, str | None], int]) -> str:
    """(outcome, verdict) -> count, for one job at one commit."""
    failed = {v for (o, v), n in outcomes.items() if n and o not in ("passed", "skipped", "flaky")}
    if failed - NOT_RED:
        return "red"
    if "environment" in failed:
        return "environment"
    if "flaky" in failed or any(n and o == "flaky" for (o, _), n in outcomes.items()):
        return "flaky"
    return "green"  # passed, skipped, or failures a maintainer ignored


def trunk_repo(dashboard, filters, viewer) -> str | None:
    """The repository whose trunk is shown: the filter's, else the one with the newest trunk run."""
    if filters.repo:
        return filters.repo
    r = dashboard.t["triage_runs"]
    with dashboard.engine.connect() as conn:
        return conn.execute(select(r.c.repo).where(r.c.pr == TRUNK, dashboard._visible(r.c.repo, viewer))
                            .order_by(r.c.started_at.desc()).limit(1)).scalar()


def trunk(dashboard, filters, viewer, commits: int = 16) -> dict:
    repo = trunk_repo(dashboard, filters, viewer)
    empty = {"repo": repo, "red": False, "commits": [], "jobs": [], "failing": [], "since": None,
             "latest": None, "environment": 0, "flaky": 0}
    if repo is None or not viewer.may_read(repo):
        return empty
    r, res, f = (dashboard.t[n] for n in ("triage_runs", "test_results", "failure_events"))
    with dashboard.engine.connect() as conn:
        runs = conn.execute(select(r.c.id, r.c.head_sha, r.c.started_at, r.c.status)
                            .where(r.c.repo == repo, r.c.pr == TRUNK, r.c.status != "abandoned")
                            .order_by(r.c.started_at.desc(), r.c.id.desc()).limit(WINDOW)).all()
        if not runs:
            return empty
        ids = [run.id for run in runs]
        conditions = [res.c.run_id.in_(ids)]
        if filters.target:
            conditions.append(res.c.target == filters.target)
        if filters.backend:
            conditions.append(res.c.backend == filters.backend)
        rows = conn.execute(
            select(res.c.run_id, res.c.suite, res.c.target, res.c.test, res.c.outcome, f.c.verdict, f.c.id,
                   f.c.category, f.c.primary_line, f.c.cluster_id)
            .join(f, and_(f.c.run_id == res.c.run_id, f.c.test == res.c.test, f.c.target == res.c.target),
                  isouter=True)
            .where(*conditions, res.c.outcome != "passed")).all()
        totals = conn.execute(select(res.c.run_id, res.c.suite, res.c.target, func.count().label("n"))
                              .where(*conditions).group_by(res.c.run_id, res.c.suite, res.c.target)).all()
    # commits newest first; a commit's runs merged (a rerun, the CI's and the bot's)
    order, runs_of, at_of = [], {}, {}
    for run in runs:
        if run.head_sha not in runs_of:
            order.append(run.head_sha)
            at_of[run.head_sha] = run.started_at
        runs_of.setdefault(run.head_sha, []).append(run.id)
    commit_of = {run.id: run.head_sha for run in runs}
    cells: dict[tuple[str, str, str], dict] = {}  # (sha, suite, target)
    for row in totals:
        cell = cells.setdefault((commit_of[row.run_id], row.suite, row.target),
                                {"outcomes": {}, "tests": 0, "run_id": row.run_id, "failure": None})
        cell["tests"] += row.n
        cell["run_id"] = max(cell["run_id"], row.run_id)
    failing_at: dict[tuple[str, str], dict[str, dict]] = {}  # (test, target) -> sha -> failure
    passed_at: dict[tuple[str, str], set[str]] = {}
    for row in rows:
        sha = commit_of[row.run_id]
        cell = cells.setdefault((sha, row.suite, row.target), {"outcomes": {}, "tests": 0, "run_id": row.run_id,
                                                                "failure": None})
        key = (row.outcome, row.verdict if row.outcome != "flaky" else "flaky")
        cell["outcomes"][key] = cell["outcomes"].get(key, 0) + 1
        red = row.outcome not in ("flaky", "skipped") and row.verdict not in NOT_RED
        if cell["failure"] is None or red:
            cell["failure"] = {"id": row.id, "run_id": row.run_id} if row.id else cell["failure"]
        if red:
            failing_at.setdefault((row.test, row.target), {})[sha] = dict(
                suite=row.suite, run_id=row.run_id, failure_id=row.id, verdict=row.verdict,
                category=row.category, primary_line=row.primary_line, cluster_id=row.cluster_id)
    jobs = sorted({(target, suite) for (_, suite, target) in cells})
    shown = order[:commits]
    grid = []
    for sha in shown:
        row = {"sha": sha, "at": at_of[sha], "run_id": max(runs_of[sha]), "cells": []}
        for target, suite in jobs:
            cell = cells.get((sha, suite, target))
            if cell is None:
                row["cells"].append({"target": target, "suite": suite, "state": "none"})
                continue
            failed = sum(n for (o, _), n in cell["outcomes"].items() if o not in ("skipped",))
            row["cells"].append({"target": target, "suite": suite, "state": cell_state(cell["outcomes"]),
                                 "run_id": cell["run_id"], "tests": cell["tests"], "not_passed": failed,
                                 "failure_id": (cell["failure"] or {}).get("id")})
        grid.append(row)
    # which (test, target) ran at which commit (to find the pass that ends a streak)
    ran: dict[tuple[str, str], list[str]] = {}
    if failing_at:
        tests = sorted({test for test, _ in failing_at})
        with dashboard.engine.connect() as conn:
            for row in conn.execute(select(res.c.run_id, res.c.test, res.c.target, res.c.outcome)
                                    .where(res.c.run_id.in_(ids), res.c.test.in_(tests))):
                key = (row.test, row.target)
                if key in failing_at:
                    ran.setdefault(key, []).append(commit_of[row.run_id])
                    if row.outcome == "passed":
                        passed_at.setdefault(key, set()).add(commit_of[row.run_id])
    failing = []
    for (test, target), by_sha in failing_at.items():
        seen = [sha for sha in order if sha in set(ran.get((test, target), ()))]
        if not seen or seen[0] not in by_sha:
            continue  # its newest result on trunk is not a failure: not failing now
        streak, last_green = [], None
        for sha in seen:
            if sha in by_sha:
                streak.append(sha)
            elif sha in passed_at.get((test, target), set()):
                last_green = sha
                break
        since, now = streak[-1], by_sha[streak[0]]
        if filters.category and now["category"] != filters.category:
            continue
        failing.append(dict(now, test=test, target=target, since_sha=since, since_at=at_of[since],
                            since_run=by_sha[since]["run_id"], since_exact=last_green is not None,
                            last_green_sha=last_green, commits_red=order.index(since) + 1,
                            latest_sha=streak[0]))
    failing.sort(key=lambda x: (-x["commits_red"], x["target"], x["test"]))
    latest_states = {}
    for target, suite in jobs:  # each job's newest state
        for sha in order:
            cell = cells.get((sha, suite, target))
            if cell is not None:
                latest_states[(target, suite)] = cell_state(cell["outcomes"])
                break
    since = max(failing, key=lambda x: x["commits_red"]) if failing else None
    return {"repo": repo, "red": bool(failing), "latest": {"sha": order[0], "at": at_of[order[0]],
                                                           "run_id": max(runs_of[order[0]])},
            "since": {"sha": since["since_sha"], "at": since["since_at"], "run_id": since["since_run"],
                      "exact": since["since_exact"], "commits": since["commits_red"]} if since else None,
            "failing": failing, "jobs": [{"target": t, "suite": s} for t, s in jobs], "commits": grid,
            "environment": sum(s == "environment" for s in latest_states.values()),
            "flaky": sum(s == "flaky" for s in latest_states.values())}
