"""What the dashboard shows, as plain JSON-ready values: the pages render them and the JSON API
returns them as they are (one source, so /api/ mirrors the pages).

Every query takes the viewer's `hidden` repositories (private ones they may not read) and
leaves their rows out. Filters: repository, backend, target, category, a time window in days,
and a page number (PAGE rows a page).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone

from sqlalchemy import Integer, and_, exists, func, select

from bot.dashboard.testpage import test_history
from bot.dashboard.trunk import trunk as trunk_status
from bot.history import TRUNK, History, day_range
from bot.queues import ENVIRONMENTS_KEY, QUEUES
from triage_rules.records import CATEGORIES

PAGE = 50
WINDOWS = (1, 7, 30, 90)
CATEGORY_RE = r"^[a-z_]{1,60}$"


class FilterError(ValueError):
    """A filter value the dashboard does not accept (the answer is 400 with this message and,
    for a value that is not one of the known ones, the valid ones)."""

    def __init__(self, message: str, name: str = "", valid: tuple[str, ...] | None = None):
        super().__init__(message)
        self.name, self.valid = name, valid


@dataclass(frozen=True)
class Choices:
    """The values a filter may take: what the history holds that this viewer may read (a
    private repository a stranger may not read is as unknown as one never seen)."""
    repos: tuple[str, ...] = ()
    backends: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()
    categories: tuple[str, ...] = CATEGORIES

    def check(self, filters: "Filters") -> "Filters":
        for name, valid in (("repo", self.repos), ("backend", self.backends), ("target", self.targets),
                            ("category", self.categories)):
            value = getattr(filters, name)
            if value and value not in valid:
                known = ", ".join(valid) if valid else "none recorded yet"
                raise FilterError(f"{name}: {value[:100]!r} is not a known {name}; choose one of: {known}",
                                  name, tuple(valid))
        return filters


@dataclass(frozen=True)
class Filters:
    repo: str = ""
    backend: str = ""
    target: str = ""
    category: str = ""
    days: int = 30
    page: int = 1

    @classmethod
    def from_args(cls, args) -> "Filters":
        def text(name, limit=200):
            value = (args.get(name) or "").strip()
            if len(value) > limit or any(ch in value for ch in "\x00\r\n"):
                raise FilterError(f"{name}: at most {limit} printable characters")
            return value

        def number(name, default, allowed=None, low=1, high=10_000):
            raw = (args.get(name) or "").strip()
            if not raw:
                return default
            if not raw.isdigit() or not low <= int(raw) <= high:
                raise FilterError(f"{name} must be a whole number from {low} to {high}, not {raw[:20]!r}")
            if allowed and int(raw) not in allowed:
                raise FilterError(f"{name} must be one of {', '.join(map(str, allowed))}")
            return int(raw)

        return cls(repo=text("repo"), backend=text("backend", 60), target=text("target", 100),
                   category=text("category", 60), days=number("days", 30, WINDOWS),
                   page=number("page", 1))

    def args(self, **override) -> dict:
        """The filters as query arguments (only those set), for links and pagination."""
        values = {k: v for k, v in dict(repo=self.repo, backend=self.backend, target=self.target,
                                        category=self.category, days=self.days, page=self.page).items()}
        values.update(override)
        return {k: v for k, v in values.items() if v and not (k == "days" and v == 30)
                and not (k == "page" and v == 1)}


def _now() -> datetime:
    return datetime.now(timezone.utc)


def plain(value):
    """Rows as JSON values: datetimes in ISO 8601 (UTC), dates as YYYY-MM-DD."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


@dataclass
class Viewer:
    """Who is looking: `hidden` are the private repositories they may not read."""
    login: str | None = None
    hidden: frozenset[str] = field(default_factory=frozenset)
    writable: frozenset[str] = field(default_factory=frozenset)  # may retry runs of these

    def may_read(self, repo: str) -> bool:
        return repo not in self.hidden

    def may_retry(self, repo: str) -> bool:
        return self.login is not None and repo in self.writable


class Dashboard:
    def __init__(self, history: History):
        self.h = history
        self.t = history.t
        self.engine = history.engine
        self.pulls = history.store.t.get("pull_requests")

    # ---- helpers -----------------------------------------------------------------------------
    def _visible(self, column, viewer: Viewer):
        return column.notin_(sorted(viewer.hidden)) if viewer.hidden else True

    def _failure_filters(self, f, filters: Filters, viewer: Viewer, since: datetime | None = None):
        conditions = [self._visible(f.c.repo, viewer)]
        if filters.repo:
            conditions.append(f.c.repo == filters.repo)
        if filters.backend:
            conditions.append(f.c.backend == filters.backend)
        if filters.target:
            conditions.append(f.c.target == filters.target)
        if filters.category:
            conditions.append(f.c.category == filters.category)
        if since is not None:
            conditions.append(f.c.at >= since)
        return and_(*conditions)

    @staticmethod
    def now() -> datetime:
        return _now()

    def choices(self, viewer: Viewer) -> Choices:
        r, h = self.t["triage_runs"], self.t["health_daily"]
        with self.engine.connect() as conn:
            repos = conn.execute(select(r.c.repo).distinct().where(self._visible(r.c.repo, viewer))).scalars()
            repos = tuple(sorted(repos))
            pairs = conn.execute(select(h.c.backend, h.c.target).distinct()
                                 .where(self._visible(h.c.repo, viewer))).all()
        return Choices(repos=repos, backends=tuple(sorted({b for b, _ in pairs if b})),
                       targets=tuple(sorted({t for _, t in pairs if t})))

    def trunk(self, filters: Filters, viewer: Viewer) -> dict:
        return plain(trunk_status(self, filters, viewer))

    def test(self, test: str, filters: Filters, viewer: Viewer) -> dict | None:
        data = test_history(self, test, filters, viewer)
        return plain(data) if data is not None else None

    def check_runs(self, repo: str, pr: int, heads: list[str]) -> dict[str, int]:
        """head sha -> the id of the bot's check run on it (the store's runs table)."""
        runs = self.h.store.t.get("runs")
        if runs is None or not heads:
            return {}
        with self.engine.connect() as conn:
            rows = conn.execute(select(runs.c.head_sha, runs.c.check_run_id).where(
                runs.c.repo == repo, runs.c.pr == pr, runs.c.head_sha.in_(heads),
                runs.c.check_run_id.is_not(None)).order_by(runs.c.id)).all()
        return {sha: check for sha, check in rows}

    def _pages(self, total: int, filters: Filters) -> dict:
        pages = max(1, -(-total // PAGE))
        return {"page": filters.page, "pages": pages, "total": total, "per_page": PAGE}

    # ---- overview --------------------------------------------------------------------------
    def overview(self, filters: Filters, viewer: Viewer) -> dict:
        now = _now()
        h, f, c, r = (self.t[n] for n in ("health_daily", "failure_events", "clusters", "triage_runs"))
        days = day_range(30, now.date())
        conditions = [h.c.day >= days[0], self._visible(h.c.repo, viewer)]
        for name in ("repo", "backend", "target"):
            if getattr(filters, name):
                conditions.append(getattr(h.c, name) == getattr(filters, name))
        with self.engine.connect() as conn:
            health_rows = conn.execute(select(
                h.c.backend, h.c.target, h.c.day, func.sum(h.c.passed).label("passed"),
                func.sum(h.c.failed).label("failed"), func.sum(h.c.flaky).label("flaky"))
                .where(*conditions).group_by(h.c.backend, h.c.target, h.c.day)).mappings().all()
            week = now - timedelta(days=7)
            busy = conn.execute(select(f.c.cluster_id, func.count().label("recent"))
                                .where(self._failure_filters(f, filters, viewer, week))
                                .group_by(f.c.cluster_id).order_by(func.count().desc(), f.c.cluster_id)
                                .limit(10)).all()
            trunk = conn.execute(select(f.c.cluster_id, func.count().label("failures"),
                                        func.max(f.c.at).label("last"),
                                        func.count(f.c.test.distinct()).label("tests"))
                                 .where(f.c.pr == TRUNK, self._failure_filters(f, filters, viewer,
                                                                              now - timedelta(days=2)))
                                 .group_by(f.c.cluster_id).order_by(func.max(f.c.at).desc()).limit(20)).all()
            ids = {row.cluster_id for row in busy} | {row.cluster_id for row in trunk}
            clusters = {row["id"]: dict(row) for row in conn.execute(
                select(c.c.id, c.c.title, c.c.category, c.c.failures, c.c.prs, c.c.last_seen)
                .where(c.c.id.in_(ids))).mappings()} if ids else {}
            latest = (select(func.max(r.c.id)).where(
                r.c.pr != TRUNK, r.c.started_at >= now - timedelta(days=filters.days),
                self._visible(r.c.repo, viewer), *( [r.c.repo == filters.repo] if filters.repo else []))
                .group_by(r.c.repo, r.c.pr))
            open_prs = [dict(row) for row in conn.execute(
                select(r.c.id, r.c.repo, r.c.pr, r.c.title, r.c.author, r.c.head_sha, r.c.started_at,
                       r.c.counts).where(r.c.id.in_(latest)).order_by(r.c.started_at.desc())).mappings()
                if (row["counts"] or {}).get("new")]
            open_prs = self._drop_closed(conn, open_prs)[:20]
        series: dict[str, dict[date, float]] = {}
        totals: dict[str, dict[str, list[int]]] = {}
        for row in health_rows:
            name = f"{row['backend']} / {row['target']}"
            day = row["day"] if isinstance(row["day"], date) else date.fromisoformat(str(row["day"]))
            ran = (row["passed"] or 0) + (row["failed"] or 0) + (row["flaky"] or 0)
            if ran:
                series.setdefault(name, {})[day] = 100.0 * (row["passed"] or 0) / ran
            for window in (7, 30):
                if day > now.date() - timedelta(days=window):
                    t = totals.setdefault(name, {}).setdefault(str(window), [0, 0])
                    t[0] += row["passed"] or 0
                    t[1] += ran
        health = [{"name": name, "backend": name.split(" / ")[0], "target": name.split(" / ")[1],
                   "pass_rate_7d": _rate(totals.get(name, {}).get("7")),
                   "pass_rate_30d": _rate(totals.get(name, {}).get("30")),
                   "runs_30d": totals.get(name, {}).get("30", [0, 0])[1],
                   "daily": [{"day": d.isoformat(), "pass_rate": round(series[name][d], 2) if d in series[name] else None}
                             for d in days]}
                  for name in sorted(series)]
        return plain({
            "filters": filters.args(), "days": [d.isoformat() for d in days],
            "trunk": trunk_status(self, filters, viewer), "health": health,
            "open_prs_with_new_failures": [_pr_summary(p) for p in open_prs],
            "trunk_failures_now": [dict(clusters.get(row.cluster_id, {"id": row.cluster_id}),
                                        id=row.cluster_id, failures_48h=row.failures, tests=row.tests,
                                        last=row.last) for row in trunk],
            "busiest_clusters": [dict(clusters.get(row.cluster_id, {"id": row.cluster_id}),
                                      id=row.cluster_id, failures_7d=row.recent) for row in busy],
        })

    def _drop_closed(self, conn, prs: list[dict]) -> list[dict]:
        if self.pulls is None or not prs:
            return prs
        p = self.pulls
        closed = set(conn.execute(select(p.c.repo, p.c.pr).where(
            p.c.state == "closed", p.c.repo.in_({x["repo"] for x in prs}))).tuples())
        return [x for x in prs if (x["repo"], x["pr"]) not in closed]

    # ---- pull requests -----------------------------------------------------------------------
    def prs(self, filters: Filters, viewer: Viewer) -> dict:
        r, f = self.t["triage_runs"], self.t["failure_events"]
        since = _now() - timedelta(days=filters.days)
        conditions = [r.c.pr != TRUNK, r.c.started_at >= since, self._visible(r.c.repo, viewer)]
        if filters.repo:
            conditions.append(r.c.repo == filters.repo)
        if filters.category or filters.backend or filters.target:
            conditions.append(exists().where(f.c.repo == r.c.repo, f.c.pr == r.c.pr,
                                             self._failure_filters(f, filters, viewer, since)))
        grouped = (select(r.c.repo, r.c.pr, func.max(r.c.id).label("latest"), func.count().label("runs"),
                          func.max(r.c.started_at).label("last")).where(*conditions)
                   .group_by(r.c.repo, r.c.pr))
        with self.engine.connect() as conn:
            total = conn.execute(select(func.count()).select_from(grouped.subquery())).scalar_one()
            page = conn.execute(grouped.order_by(func.max(r.c.started_at).desc(), r.c.repo, r.c.pr)
                                .limit(PAGE).offset((filters.page - 1) * PAGE)).all()
            runs = {row["id"]: dict(row) for row in conn.execute(select(
                r.c.id, r.c.repo, r.c.pr, r.c.title, r.c.author, r.c.head_sha, r.c.status,
                r.c.conclusion, r.c.started_at, r.c.deadline_at, r.c.counts)
                .where(r.c.id.in_([p.latest for p in page]))).mappings()}
        items = [dict(_pr_summary(runs[p.latest]), runs=p.runs) for p in page]
        return plain({"filters": filters.args(), "pagination": self._pages(total, filters), "items": items})

    def pr(self, repo: str, number: int, viewer: Viewer) -> dict | None:
        if not viewer.may_read(repo):
            return None
        r, f, c = self.t["triage_runs"], self.t["failure_events"], self.t["clusters"]
        with self.engine.connect() as conn:
            runs = [dict(row) for row in conn.execute(select(
                r.c.id, r.c.head_sha, r.c.trigger, r.c.status, r.c.conclusion, r.c.attempt, r.c.started_at,
                r.c.finished_at, r.c.deadline_at, r.c.counts, r.c.title, r.c.author, r.c.stage_seconds)
                .where(r.c.repo == repo, r.c.pr == number).order_by(r.c.started_at.desc(), r.c.id.desc())).mappings()]
            if not runs:
                return None
            for x in runs:
                x["status"] = run_status(x)
            latest = next((x for x in runs if x["status"] == "completed"), runs[0])
            comment = conn.execute(select(r.c.comment).where(r.c.id == latest["id"])).scalar()
            failures = [dict(row) for row in conn.execute(select(
                f.c.id, f.c.test, f.c.target, f.c.verdict, f.c.category, f.c.rule, f.c.confidence,
                f.c.primary_line, f.c.suspects, f.c.cluster_id, c.c.trunk_failures)
                .join(c, c.c.id == f.c.cluster_id, isouter=True)
                .where(f.c.run_id == latest["id"]).order_by(f.c.id)).mappings()]
        for failure in failures:
            failure["seen_on_trunk"] = bool(failure.pop("trunk_failures"))
        checks = self.check_runs(repo, number, sorted({x["head_sha"] for x in runs if x["head_sha"]}))
        for x in runs:
            x["check_run_id"] = checks.get(x["head_sha"])
        return plain({"repo": repo, "pr": number, "title": runs[0]["title"], "author": runs[0]["author"],
                      "latest_run": latest["id"], "counts": latest["counts"] or {}, "comment": comment or "",
                      "failures": failures, "pushes": runs})

    # ---- clusters ----------------------------------------------------------------------------
    def clusters(self, filters: Filters, viewer: Viewer) -> dict:
        c, f = self.t["clusters"], self.t["failure_events"]
        since = _now() - timedelta(days=filters.days)
        conditions = [c.c.last_seen >= since]
        if filters.category:
            conditions.append(c.c.category == filters.category)
        if filters.repo or filters.backend or filters.target or viewer.hidden:
            conditions.append(exists().where(f.c.cluster_id == c.c.id,
                                             self._failure_filters(f, Filters(
                                                 repo=filters.repo, backend=filters.backend,
                                                 target=filters.target), viewer)))
        with self.engine.connect() as conn:
            total = conn.execute(select(func.count()).select_from(c).where(*conditions)).scalar_one()
            rows = [dict(row) for row in conn.execute(
                select(c.c.id, c.c.category, c.c.title, c.c.owners, c.c.failures, c.c.prs, c.c.trunk_failures,
                       c.c.first_seen, c.c.last_seen, c.c.daily).where(*conditions)
                .order_by(c.c.last_seen.desc(), c.c.id).limit(PAGE).offset((filters.page - 1) * PAGE)).mappings()]
        days = [d.isoformat() for d in day_range(30)]
        for row in rows:
            daily = row.pop("daily") or {}
            if isinstance(daily, str):
                daily = json.loads(daily)
            row["daily"] = [daily.get(d, 0) for d in days]
        if viewer.hidden and rows:  # the clusters' stored totals count every repository: recount
            self._recount_visible(rows, days, viewer)
        return plain({"filters": filters.args(), "pagination": self._pages(total, filters), "items": rows})

    def _recount_visible(self, rows: list[dict], days: list[str], viewer: Viewer) -> None:
        """A cluster's failures, PRs, trunk failures and daily counts from the failures this viewer
        may see (a stranger: public repositories only), never the stored totals over all."""
        f = self.t["failure_events"]
        since = datetime.combine(date.fromisoformat(days[0]), datetime.min.time(), tzinfo=timezone.utc)
        with self.engine.connect() as conn:
            events = conn.execute(select(f.c.cluster_id, f.c.repo, f.c.pr, f.c.at)
                                  .where(f.c.cluster_id.in_([r["id"] for r in rows]),
                                         self._visible(f.c.repo, viewer))).all()
        by_cluster: dict[str, list] = {}
        for event in events:
            by_cluster.setdefault(event.cluster_id, []).append(event)
        for row in rows:
            seen = by_cluster.get(row["id"], [])
            row["failures"] = len(seen)
            row["prs"] = len({(e.repo, e.pr) for e in seen if e.pr != TRUNK})
            row["trunk_failures"] = sum(e.pr == TRUNK for e in seen)
            per_day: dict[str, int] = {}
            for e in seen:
                at = e.at if e.at.tzinfo else e.at.replace(tzinfo=timezone.utc)
                if at >= since:
                    per_day[at.date().isoformat()] = per_day.get(at.date().isoformat(), 0) + 1
            row["daily"] = [per_day.get(d, 0) for d in days]

    def cluster(self, cluster_id: str, filters: Filters, viewer: Viewer) -> dict | None:
        c, f, r = self.t["clusters"], self.t["failure_events"], self.t["triage_runs"]
        visible = and_(f.c.cluster_id == cluster_id, self._visible(f.c.repo, viewer))
        with self.engine.connect() as conn:
            row = conn.execute(select(c).where(c.c.id == cluster_id)).mappings().first()
            if row is None:
                return None
            total = conn.execute(select(func.count()).select_from(f).where(visible)).scalar_one()
            if not total:
                return None
            occurrences = [dict(o) for o in conn.execute(
                select(f.c.id, f.c.run_id, f.c.repo, f.c.pr, f.c.sha, f.c.source, f.c.test, f.c.target,
                       f.c.verdict, f.c.primary_line, f.c.at, r.c.title)
                .join(r, r.c.id == f.c.run_id, isouter=True).where(visible)
                .order_by(f.c.at.desc(), f.c.id.desc()).limit(PAGE).offset((filters.page - 1) * PAGE)).mappings()]
            lines = [dict(line=o.primary_line, count=o.n) for o in conn.execute(
                select(f.c.primary_line, func.count().label("n")).where(visible)
                .group_by(f.c.primary_line).order_by(func.count().desc()).limit(10))]
            prs = [dict(repo=o.repo, pr=o.pr, failures=o.n, last=o.last) for o in conn.execute(
                select(f.c.repo, f.c.pr, func.count().label("n"), func.max(f.c.at).label("last"))
                .where(visible).group_by(f.c.repo, f.c.pr).order_by(func.max(f.c.at).desc()).limit(100))]
            jobs = [dict(source=o.source, failures=o.n) for o in conn.execute(
                select(f.c.source, func.count().label("n")).where(visible).group_by(f.c.source)
                .order_by(func.count().desc()).limit(50))]
        cluster = dict(row)
        cluster.pop("text", None)
        daily = cluster.pop("daily") or {}
        cluster["daily"] = [daily.get(d.isoformat(), 0) for d in day_range(30)]
        return plain({"cluster": cluster, "pagination": self._pages(total, filters), "occurrences": occurrences,
                      "primary_lines": lines, "prs": prs, "jobs": jobs})

    # ---- flaky tests -------------------------------------------------------------------------
    def flaky(self, filters: Filters, viewer: Viewer) -> dict:
        s, res = self.t["flaky_stats"], self.t["test_results"]
        conditions = [s.c.flaky > 0, self._visible(s.c.repo, viewer),
                      s.c.last_flaky_at >= _now() - timedelta(days=filters.days)]
        if filters.repo:
            conditions.append(s.c.repo == filters.repo)
        if filters.target:
            conditions.append(s.c.target == filters.target)
        with self.engine.connect() as conn:
            total = conn.execute(select(func.count()).select_from(s).where(*conditions)).scalar_one()
            rows = [dict(row) for row in conn.execute(select(s).where(*conditions)
                    .order_by(s.c.lower.desc(), s.c.test, s.c.target)
                    .limit(PAGE).offset((filters.page - 1) * PAGE)).mappings()]
            week = _now() - timedelta(days=7)
            tests = sorted({row["test"] for row in rows})
            repos = sorted({row["repo"] for row in rows})
            trend = {}
            if tests:
                month = _now() - timedelta(days=30)
                for recent, window in ((True, res.c.at >= week), (False, and_(res.c.at >= month, res.c.at < week))):
                    for t in conn.execute(select(
                            res.c.repo, res.c.test, res.c.target, func.count().label("runs"),
                            func.sum(func.cast(res.c.outcome == "flaky", Integer)).label("flaky"))
                            .where(res.c.repo.in_(repos), res.c.test.in_(tests),  # the (repo, test) index
                                   res.c.outcome != "skipped", window)
                            .group_by(res.c.repo, res.c.test, res.c.target)):
                        trend[(t.repo, t.test, t.target, recent)] = (t.flaky or 0) / t.runs if t.runs else None
                targets = {}
                for t in conn.execute(select(s.c.repo, s.c.test, s.c.target).where(
                        s.c.test.in_(tests), s.c.flaky > 0)):
                    targets.setdefault((t.repo, t.test), []).append(t.target)
        for row in rows:
            key = (row["repo"], row["test"], row["target"])
            recent, before = trend.get(key + (True,)), trend.get(key + (False,))
            row["rate_7d"], row["rate_before"] = recent, before
            row["trend"] = ("new" if before is None and recent else "rising" if recent is not None and before
                            is not None and recent > before else "falling" if recent is not None and before
                            is not None and recent < before else "steady")
            row["flaky_targets"] = sorted(targets.get((row["repo"], row["test"]), []))
            row.pop("updated_at", None)
        return plain({"filters": filters.args(), "pagination": self._pages(total, filters), "items": rows})

    # ---- one run -----------------------------------------------------------------------------
    def run(self, run_id: int, viewer: Viewer) -> dict | None:
        r, res, f = self.t["triage_runs"], self.t["test_results"], self.t["failure_events"]
        with self.engine.connect() as conn:
            run = conn.execute(select(r).where(r.c.id == run_id)).mappings().first()
            if run is None or not viewer.may_read(run["repo"]):
                return None
            results = [dict(row) for row in conn.execute(select(
                res.c.suite, res.c.test, res.c.target, res.c.backend, res.c.outcome, res.c.retries, res.c.duration)
                .where(res.c.run_id == run_id).order_by(res.c.suite, res.c.target, res.c.test)).mappings()]
            failures = [dict(row) for row in conn.execute(select(
                f.c.id, f.c.test, f.c.target, f.c.verdict, f.c.category, f.c.rule, f.c.confidence, f.c.primary_line,
                f.c.line_no, f.c.source, f.c.cluster_id, f.c.suspects).where(f.c.run_id == run_id)
                .order_by(f.c.id)).mappings()]
        run = dict(run)
        run.pop("key", None)
        run["status"] = run_status(run)
        suites: dict[str, dict[str, dict]] = {}
        for result in results:
            per_target = suites.setdefault(result["suite"], {}).setdefault(
                result["target"], {"passed": 0, "failed": 0, "flaky": 0, "skipped": 0, "error": 0, "tests": []})
            per_target[result["outcome"] if result["outcome"] in per_target else "failed"] += 1
            per_target["tests"].append(result)
        log = (run.pop("log") or "").splitlines()
        for failure in failures:
            failure["log_line"] = failure_line(log, failure)
        primary = run.get("primary_line_no")
        if primary is None or not 0 <= primary < len(log):
            primary = next((x["log_line"] for x in failures if x["log_line"] is not None), None)
        run["check_run_id"] = self.check_runs(run["repo"], run["pr"], [run["head_sha"]]).get(run["head_sha"])
        return plain({"run": run, "suites": [{"suite": s, "targets": [dict(v, target=t) for t, v in targets.items()]}
                                             for s, targets in suites.items()],
                      "failures": failures, "log": {"lines": log, "primary": primary}})

    def repositories(self) -> set[str]:
        r = self.t["triage_runs"]
        with self.engine.connect() as conn:
            return set(conn.execute(select(r.c.repo).distinct()).scalars())

    # ---- devices and queues ------------------------------------------------------------------
    def devices(self) -> list[dict]:
        d = self.t["devices"]
        with self.engine.connect() as conn:
            return plain([dict(row) for row in conn.execute(select(d).order_by(d.c.id)).mappings()])


FIRST_SEEN = "etriage:dashboard:first_seen"  # task id -> when the dashboard first saw it queued


def queues(redis_client, now: float | None = None) -> list[dict]:
    """Each Celery queue's depth and the age of its oldest task. A Celery message carries no
    send time, so the age is counted from when the dashboard (or /metrics) first saw that task
    at the head of its queue: a lower bound, exact when something looks every minute."""
    now = now if now is not None else time.time()
    out = []
    for name in QUEUES:
        depth = int(redis_client.llen(name))
        age = None
        if depth:
            raw = redis_client.lindex(name, -1)  # kombu LPUSHes and BRPOPs: the oldest is last
            task_id = _task_id(raw)
            if task_id:
                redis_client.hsetnx(FIRST_SEEN, task_id, f"{now:.3f}")
                redis_client.expire(FIRST_SEEN, 7 * 86400)
                seen = redis_client.hget(FIRST_SEEN, task_id)
                age = max(0.0, round(now - float(seen), 3)) if seen else 0.0
        out.append({"queue": name, "depth": depth, "oldest_age_seconds": age})
    return out


def environments(redis_client) -> list[dict]:
    """Commit environments the `build` workers are making or made (tasks/warm.py writes them),
    newest first: what each cost in seconds and on disk, and why one failed."""
    out = []
    for raw in redis_client.hvals(ENVIRONMENTS_KEY):
        try:
            entry = json.loads(raw)
        except (TypeError, ValueError):
            continue
        if isinstance(entry, dict) and {"repo", "sha", "state"} <= set(entry):
            out.append({k: entry.get(k) for k in ("repo", "branch", "sha", "state", "started", "seconds",
                                                  "compiled", "disk_bytes", "reason")})
    return sorted(out, key=lambda e: -(e.get("started") or 0))


def _task_id(raw) -> str | None:
    try:
        message = json.loads(raw)
    except (TypeError, ValueError):
        return None
    headers = message.get("headers") or {}
    return headers.get("id") or (message.get("properties") or {}).get("correlation_id")


def failure_line(log: list[str], failure: dict) -> int | None:
    """The index of a failure's primary line in the run's log: its recorded line number when that
    line is the primary line, else the first line equal to it, preferring one after a line that
    names its test (a log holds the sections of several tests)."""
    wanted = (failure.get("primary_line") or "").strip()
    if not wanted:
        return None
    recorded = failure.get("line_no")
    if isinstance(recorded, int) and 0 <= recorded < len(log) and log[recorded].strip() == wanted:
        return recorded
    test = failure.get("test") or ""
    start = next((i for i, line in enumerate(log) if test and test in line), 0)
    for begin in (start, 0):
        found = next((i for i in range(begin, len(log)) if log[i].strip() == wanted), None)
        if found is not None:
            return found
    return None


def run_status(run: dict) -> str | None:
    """A run still `running` or `queued` past its deadline is shown as abandoned (its worker is
    gone), whether or not History.abandon_overdue has written that yet."""
    deadline = run.get("deadline_at")
    if run.get("status") in ("running", "queued") and deadline is not None:
        if deadline.tzinfo is None:
            deadline = deadline.replace(tzinfo=timezone.utc)
        if deadline < _now():
            return "abandoned"
    return run.get("status")


def _rate(pair) -> float | None:
    if not pair or not pair[1]:
        return None
    return round(100.0 * pair[0] / pair[1], 2)


def _pr_summary(run: dict) -> dict:
    counts = run.get("counts") or {}
    return {"repo": run["repo"], "pr": run["pr"], "title": run.get("title") or "", "author": run.get("author") or "",
            "head_sha": run.get("head_sha") or "", "latest_run": run["id"], "last_run_at": run.get("started_at"),
            "status": run_status(run), "conclusion": run.get("conclusion"),
            "counts": {k: int(counts.get(k, 0)) for k in ("new", "pre_existing", "flaky", "environment", "ignored")}}
