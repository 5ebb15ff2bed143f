"""One test across trunk, pull requests and targets (SoCs): its results per target on trunk and
on PRs, its newest outcomes as a strip of links, how flaky it is where, the clusters its
failures fell into, and its latest failures."""
from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func, select

from bot.history import TRUNK

STRIP = 30  # newest results per target and side shown as cells
RESULTS = 600  # newest results read for the strips (the counts are the database's)


def test_history(dashboard, test: str, filters, viewer) -> dict | None:
    r, res, f, c, s, d = (dashboard.t[n] for n in ("triage_runs", "test_results", "failure_events", "clusters",
                                                     "flaky_stats", "devices"))
    repos = sorted(dashboard.choices(viewer).repos)
    if filters.repo:
        repos = [x for x in repos if x == filters.repo]
    if not repos:
        return None
    since = dashboard.now() - timedelta(days=filters.days)
    target = [res.c.target == filters.target] if filters.target else []
    with dashboard.engine.connect() as conn:
        # trunk's run ids from the (repo, pr) index: joining each result to its run would read
        # the runs' wide rows (logs, comments)
        trunk_runs = set(conn.execute(select(r.c.id).where(r.c.repo.in_(repos), r.c.pr == TRUNK)).scalars())
        where = (res.c.repo.in_(repos), res.c.test == test, res.c.at >= since, *target)
        counted = conn.execute(select(res.c.target, res.c.run_id, res.c.outcome).where(*where)).all()
        results = conn.execute(
            select(res.c.run_id, res.c.repo, res.c.target, res.c.outcome, res.c.at, res.c.sha).where(*where)
            .order_by(res.c.at.desc(), res.c.run_id.desc()).limit(RESULTS)).all()
        failures = [dict(row) for row in conn.execute(
            select(f.c.id, f.c.run_id, f.c.repo, f.c.pr, f.c.sha, f.c.target, f.c.verdict, f.c.category,
                   f.c.primary_line, f.c.cluster_id, f.c.at)
            .where(f.c.repo.in_(repos), f.c.test == test, f.c.at >= since,
                   *([f.c.target == filters.target] if filters.target else []))
            .order_by(f.c.at.desc(), f.c.id.desc())).mappings()]
        flaky = {(row.repo, row.target): row for row in conn.execute(
            select(s).where(s.c.repo.in_(repos), s.c.test == test))}
        socs = dict(conn.execute(select(d.c.target, func.min(d.c.soc)).group_by(d.c.target)).all())
        cluster_ids = sorted({x["cluster_id"] for x in failures if x["cluster_id"]})
        clusters = {row.id: row for row in conn.execute(
            select(c.c.id, c.c.title, c.c.category).where(c.c.id.in_(cluster_ids)))} if cluster_ids else {}
    if not counted and not failures:
        return None
    failure_of = {}
    for x in failures:
        failure_of.setdefault((x["run_id"], x["target"]), x)
    failure_pr = dict(_prs_of(dashboard, {row.run_id for row in results if row.run_id not in trunk_runs}))
    per_target: dict[str, dict] = {}
    for target_name, run_id, outcome in counted:
        t = per_target.setdefault(target_name, {"target": target_name, "soc": socs.get(target_name),
                                                "trunk": _side(), "prs": _side()})
        side = t["trunk" if run_id in trunk_runs else "prs"]
        side[_bucket(outcome)] += 1
        side["runs"] += 1
    for row in results:
        side = per_target[row.target]["trunk" if row.run_id in trunk_runs else "prs"]
        bucket = _bucket(row.outcome)
        if len(side["strip"]) < STRIP:
            failure = failure_of.get((row.run_id, row.target))
            side["strip"].append({"run_id": row.run_id, "outcome": bucket, "at": row.at, "sha": row.sha,
                                  "repo": row.repo, "pr": TRUNK if row.run_id in trunk_runs else
                                  failure_pr.get(row.run_id),
                                  "verdict": failure["verdict"] if failure else None,
                                  "failure_id": failure["id"] if failure else None})
    for t in per_target.values():
        for side in ("trunk", "prs"):
            t[side]["strip"].reverse()  # oldest first, newest at the right
            t[side]["last"] = t[side]["strip"][-1]["outcome"] if t[side]["strip"] else None
        stats = [flaky[k] for k in flaky if k[1] == t["target"]]
        runs, flaky_runs = sum(x.runs or 0 for x in stats), sum(x.flaky or 0 for x in stats)
        t["flaky_rate"] = flaky_runs / runs if runs else None
        t["flaky_lower"] = max((x.lower or 0.0 for x in stats), default=None)
    grouped: dict[str, dict] = {}
    for x in failures:
        if not x["cluster_id"]:
            continue
        g = grouped.setdefault(x["cluster_id"], {"id": x["cluster_id"], "failures": 0, "trunk": 0, "prs": set(),
                                                 "verdicts": {}, "first": x["at"], "last": x["at"],
                                                 "title": getattr(clusters.get(x["cluster_id"]), "title", None),
                                                 "category": getattr(clusters.get(x["cluster_id"]), "category", None)})
        g["failures"] += 1
        g["trunk"] += x["pr"] == TRUNK
        if x["pr"] != TRUNK:
            g["prs"].add((x["repo"], x["pr"]))
        g["verdicts"][x["verdict"]] = g["verdicts"].get(x["verdict"], 0) + 1
        g["first"] = min(g["first"], x["at"])
        g["last"] = max(g["last"], x["at"])
    for g in grouped.values():
        g["prs"] = len(g["prs"])
    return {"test": test, "repos": sorted({row.repo for row in results} | {x["repo"] for x in failures}),
            "targets": [per_target[k] for k in sorted(per_target)],
            "clusters": sorted(grouped.values(), key=lambda g: (-g["failures"], g["id"])),
            "failures": failures[:20], "failure_count": len(failures)}


def _prs_of(dashboard, run_ids: set[int]) -> list[tuple[int, int]]:
    """(run id, PR number) of these runs (the strips' PR cells link their PR)."""
    if not run_ids:
        return []
    r = dashboard.t["triage_runs"]
    with dashboard.engine.connect() as conn:
        return list(conn.execute(select(r.c.id, r.c.pr).where(r.c.id.in_(sorted(run_ids)))).tuples())


def _bucket(outcome: str) -> str:
    return outcome if outcome in ("passed", "flaky", "skipped") else "failed"


def _side() -> dict:
    return {"runs": 0, "passed": 0, "failed": 0, "flaky": 0, "skipped": 0, "strip": []}
