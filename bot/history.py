"""History the dashboard reads: runs, per-test results, failures, clusters, flaky statistics,
daily health and devices, in the store's database and MetaData (one schema for Alembic).

`History(store)` adds these tables to the store's MetaData (bot/migrations/versions/
0002_history.py creates them). `record_run` takes the pipeline's Report (tasks.records.Report,
read by duck typing: bot never imports tasks) or its stored JSON and writes everything the
pages show, keyed by the run's `key`, so a redelivered task writes nothing twice. Clusters are
kept incrementally per recorded run; `recluster()` recomputes them from every failure (same
ids: triage_rules.cluster founds clusters in order of first sighting).
"""
from __future__ import annotations

import functools
from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from importlib import resources

import yaml

from sqlalchemy import (JSON, Boolean, Column, Date, DateTime, Float, Index, Integer, MetaData,
                        String, Table, Text, UniqueConstraint, bindparam, case, func, select)

from triage_rules.rules import owners_of
from triage_rules.cluster import Cluster, Clusterer, Group, cluster_groups, cluster_text, wilson_lower_bound

TABLES = ("triage_runs", "test_results", "failure_events", "clusters", "flaky_stats",
          "health_daily", "devices")
RUN_STATUSES = ("queued", "running", "completed", "failed", "abandoned", "superseded")
TRUNK = 0  # the pr number of a trunk (default branch) run


def _now() -> datetime:
    return datetime.now(timezone.utc)


def history_tables(metadata: MetaData, p: str = "") -> dict[str, Table]:
    """The history tables under prefix `p`, added to `metadata` (once per MetaData)."""
    if f"{p}triage_runs" in metadata.tables:
        return {name: metadata.tables[f"{p}{name}"] for name in TABLES}

    def table(name, *columns):
        return Table(f"{p}{name}", metadata, *columns)

    def when(name, index=False):
        return Column(name, DateTime(timezone=True), index=index)

    return {
        "triage_runs": table(
            "triage_runs", Column("id", Integer, primary_key=True),
            Column("key", String(300), nullable=False, unique=True),
            Column("repo", String(200), nullable=False), Column("pr", Integer, nullable=False),
            Column("head_sha", String(64)), Column("base_sha", String(64)),
            Column("trigger", String(40)), Column("kind", String(20)),
            Column("title", Text), Column("author", String(200)),
            Column("status", String(20)), Column("conclusion", String(20)),
            Column("attempt", Integer), Column("retry_of", Integer),
            when("started_at", index=True), when("finished_at"), when("deadline_at"),
            Column("stage_seconds", JSON), Column("counts", JSON), Column("plan", JSON),
            Column("build", JSON), Column("suites", JSON), Column("comment", Text),
            Column("log", Text), Column("primary_line_no", Integer),
            Index(f"{p}ix_triage_runs_repo_pr", "repo", "pr")),
        "test_results": table(
            "test_results", Column("id", Integer, primary_key=True),
            Column("run_id", Integer, nullable=False), Column("repo", String(200)),
            Column("sha", String(64)), Column("suite", String(200)), Column("test", String(500)),
            Column("target", String(100)), Column("backend", String(60)),
            Column("outcome", String(20)), Column("retries", Integer), Column("duration", Float),
            when("at"),
            UniqueConstraint("run_id", "suite", "target", "test"),
            # covering for the flaky trend: (repo, test, target) then time, outcome read from it
            Index(f"{p}ix_test_results_test", "repo", "test", "target", "at", "outcome")),
        "failure_events": table(
            "failure_events", Column("id", Integer, primary_key=True),
            Column("run_id", Integer, nullable=False), Column("repo", String(200)),
            Column("pr", Integer), Column("sha", String(64)), Column("source", String(300)),
            Column("test", String(500)), Column("target", String(100)),
            Column("backend", String(60)), Column("verdict", String(20)),
            Column("category", String(60)), Column("rule", String(200)),
            Column("confidence", Float), Column("fingerprint", String(100), index=True),
            Column("primary_line", Text), Column("line_no", Integer), Column("text", Text),
            Column("suspects", JSON), Column("cluster_id", String(16), index=True),
            when("at", index=True),
            UniqueConstraint("run_id", "source", "test", "fingerprint"),
            Index(f"{p}ix_failure_events_repo_pr", "repo", "pr")),
        "clusters": table(
            "clusters", Column("id", String(16), primary_key=True), Column("text", Text),
            Column("title", Text), Column("category", String(60)), Column("owners", JSON),
            Column("sample_line", Text), Column("failures", Integer), Column("prs", Integer),
            Column("trunk_failures", Integer), when("first_seen"), when("last_seen", index=True),
            Column("daily", JSON), when("updated_at")),
        "flaky_stats": table(
            "flaky_stats", Column("repo", String(200), primary_key=True),
            Column("test", String(500), primary_key=True), Column("target", String(100), primary_key=True),
            Column("runs", Integer), Column("failures", Integer), Column("flaky", Integer),
            Column("rate", Float), Column("lower", Float, index=True), when("last_flaky_at"),
            Column("last_flaky_run", Integer), when("updated_at")),
        "health_daily": table(
            "health_daily", Column("repo", String(200), primary_key=True),
            Column("backend", String(60), primary_key=True), Column("target", String(100), primary_key=True),
            Column("day", Date, primary_key=True), Column("passed", Integer), Column("failed", Integer),
            Column("flaky", Integer), Column("skipped", Integer)),
        "devices": table(
            "devices", Column("id", String(100), primary_key=True), Column("name", String(200)),
            Column("target", String(100)), Column("soc", String(60)), Column("host", String(200)),
            Column("status", String(20)), Column("lease_holder", String(300)), when("last_seen"),
            Column("details", JSON)),
    }


def backend_of(suite: str, target: str, test: str = "") -> str:
    """The backend a result belongs to (the catalogue's names): QNN targets and suites are
    `qualcomm`, an XNNPACK test or flow `xnnpack`, the rest `portable`."""
    text = f"{suite} {target} {test}".lower()
    if "qnn" in text or "qualcomm" in text or target.startswith("android"):
        return "qualcomm"
    if "xnnpack" in text:
        return "xnnpack"
    return "portable"


def _field(record, name, default=None):
    if isinstance(record, dict):
        return record.get(name, default)
    return getattr(record, name, default)


@dataclass
class RunInfo:
    """What a triage run was, beside its report: who asked, for which PR, when."""
    repo: str
    pr: int = TRUNK
    trigger: str = "pull_request"
    kind: str = "pr"
    title: str = ""
    author: str = ""
    started_at: datetime | None = None
    attempt: int = 1
    key: str = ""
    comment: str = ""
    log: str = ""


class History:
    def __init__(self, store):
        self.store = store
        self.engine = store.engine
        self.t = history_tables(store.metadata, store.prefix)
        if hasattr(store, "t") and isinstance(store.t, dict):
            store.t.update(self.t)  # store.drop_all() drops them too

    def _insert(self, table: Table):
        if self.engine.dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert
        return insert(table)

    # ---- runs ------------------------------------------------------------------------------
    def start_run(self, info: RunInfo, *, head_sha: str, base_sha: str = "",
                  time_limit: timedelta = timedelta(hours=2), retry_of: int | None = None) -> int:
        """A run row in `running`, with its deadline; idempotent by key."""
        t = self.t["triage_runs"]
        now = info.started_at or _now()
        key = info.key or f"{info.repo}#{info.pr}@{head_sha}:{info.kind}:{info.attempt}"
        with self.engine.begin() as conn:
            conn.execute(self._insert(t).values(
                key=key, repo=info.repo, pr=info.pr, head_sha=head_sha, base_sha=base_sha,
                trigger=info.trigger, kind=info.kind, title=info.title, author=info.author,
                status="running", attempt=info.attempt, retry_of=retry_of, started_at=now,
                deadline_at=now + time_limit).on_conflict_do_nothing(index_elements=["key"]))
            return conn.execute(select(t.c.id).where(t.c.key == key)).scalar_one()

    def abandon_overdue(self, now: datetime | None = None) -> list[int]:
        """Runs still running past their deadline become `abandoned` (their worker is gone)."""
        t = self.t["triage_runs"]
        now = now or _now()
        with self.engine.begin() as conn:
            ids = list(conn.execute(select(t.c.id).where(
                t.c.status.in_(("running", "queued")), t.c.deadline_at < now)).scalars())
            if ids:
                conn.execute(t.update().where(t.c.id.in_(ids)).values(status="abandoned", finished_at=now))
        return ids

    def retry(self, run_id: int, *, time_limit: timedelta = timedelta(hours=2)) -> int:
        """A new attempt of an abandoned or failed run (queued, `retry_of` the old one)."""
        old = self.run(run_id)
        if old is None:
            raise KeyError(f"no run {run_id}")
        if old["status"] not in ("abandoned", "failed"):
            raise ValueError(f"run {run_id} is {old['status']}; only abandoned or failed runs are retried")
        info = RunInfo(repo=old["repo"], pr=old["pr"], trigger="retry", kind=old["kind"],
                       title=old["title"] or "", author=old["author"] or "",
                       attempt=(old["attempt"] or 1) + 1)
        new_id = self.start_run(info, head_sha=old["head_sha"], base_sha=old["base_sha"] or "",
                                time_limit=time_limit, retry_of=run_id)
        with self.engine.begin() as conn:
            conn.execute(self.t["triage_runs"].update().where(self.t["triage_runs"].c.id == new_id)
                         .values(status="queued"))
        return new_id

    def run(self, run_id: int) -> dict | None:
        t = self.t["triage_runs"]
        with self.engine.connect() as conn:
            row = conn.execute(select(t).where(t.c.id == run_id)).mappings().first()
        return dict(row) if row else None

    def _latest_attempt(self, info: RunInfo, head_sha: str) -> dict | None:
        """The newest run of this head (a retry's queued attempt, a running or abandoned one)."""
        t = self.t["triage_runs"]
        with self.engine.connect() as conn:
            row = conn.execute(select(t.c.id, t.c.status).where(
                t.c.repo == info.repo, t.c.pr == info.pr, t.c.head_sha == head_sha, t.c.kind == info.kind)
                .order_by(t.c.id.desc()).limit(1)).mappings().first()
        return dict(row) if row else None

    # ---- recording a finished run -------------------------------------------------------------
    def record_run(self, report, info: RunInfo, *, stage_seconds: dict | None = None,
                   finished_at: datetime | None = None) -> int:
        """Everything the dashboard shows of one finished triage. `report` is a
        tasks.records.Report or its JSON (`Report.to_dict()` or `asdict`); returns the run id."""
        data = report if isinstance(report, dict) else report.to_dict()
        suites = list(report.suites) if not isinstance(report, dict) else data.get("suites", [])
        head, base = data.get("head", ""), data.get("merge_base") or data.get("base", "")
        latest = None if info.key else self._latest_attempt(info, head)
        if latest is not None and latest["status"] == "completed":
            return latest["id"]  # a redelivery: recorded already
        run_id = latest["id"] if latest is not None else self.start_run(info, head_sha=head, base_sha=base)
        when = finished_at or _now()
        started = info.started_at or when - timedelta(seconds=float(data.get("seconds") or 0))
        build = data.get("build") or {}
        stages = stage_seconds or _stages(data, suites)
        verdicts = [_verdict(v) for v in data.get("results") or []]
        by_test = {(v["suite"], v["target"], v["test"]): v for v in verdicts}
        rows = []
        for suite in suites:
            for test in (_field(suite, "tests") or []) if not isinstance(_field(suite, "tests"), int) else []:
                key = (_field(test, "suite"), _field(test, "target"), _field(test, "test"))
                verdict = by_test.get(key, {}).get("verdict")
                outcome = "flaky" if verdict == "flaky" else _field(test, "outcome")
                rows.append(dict(suite=key[0], target=key[1], test=key[2], outcome=outcome,
                                 retries=1 if verdict == "flaky" else 0,
                                 duration=float(_field(test, "seconds") or 0)))
        seen = {(r["suite"], r["target"], r["test"]) for r in rows}
        for v in verdicts:  # a verdict whose test list the JSON dropped still counts
            if (v["suite"], v["target"], v["test"]) not in seen:
                rows.append(dict(suite=v["suite"], target=v["target"], test=v["test"],
                                 outcome={"flaky": "flaky", "fixed": "passed"}.get(v["verdict"], "failed"),
                                 retries=1 if v["verdict"] == "flaky" else 0, duration=0.0))
        failures = [dict(
            run_id=run_id, repo=info.repo, pr=info.pr, sha=head,
            source=f"etriage:{v['suite']}@{v['target']}", test=v["test"], target=v["target"],
            backend=backend_of(v["suite"], v["target"], v["test"]), verdict=v["verdict"],
            category=v["category"], rule=v["rule"], confidence=v["confidence"],
            fingerprint=v["fingerprint"], primary_line=v["primary_line"], line_no=v["line_no"],
            text=cluster_text(v["primary_line"] or v["title"] or v["test"]),
            suspects=[{k: s.get(k) for k in ("path", "symbol", "line", "score", "reason")}
                      for s in v["suspects"]], at=when)
            for v in verdicts if v["verdict"] != "fixed"]
        counts = dict(data.get("summary") or {})
        suites_summary = [{k: (len(v) if k == "tests" and isinstance(v, list) else v)
                           for k, v in (s if isinstance(s, dict) else s.to_dict()).items()
                           if k in ("suite", "target", "status", "reason", "tests", "seconds")}
                          for s in suites]
        t = self.t["triage_runs"]
        with self.engine.begin() as conn:
            conn.execute(t.update().where(t.c.id == run_id).values(
                status="completed", conclusion="failure" if counts.get("new") else "success",
                started_at=started, finished_at=when, stage_seconds=stages, counts=counts,
                plan={k: (data.get("plan") or {}).get(k) for k in
                      ("changed_files", "areas", "backends", "suites", "targets", "notes", "docs_only")},
                build={k: build.get(k) for k in ("status", "kind", "reason", "seconds", "cache_hits")},
                suites=suites_summary, comment=info.comment, log=info.log or build.get("log_excerpt", "")))
            self._write_results(conn, run_id, info, head, when, rows)
            self._write_failures(conn, failures)
        return run_id

    def record_results(self, run_id: int, info: RunInfo, sha: str, rows: list[dict],
                       at: datetime | None = None) -> None:
        with self.engine.begin() as conn:
            self._write_results(conn, run_id, info, sha, at or _now(), rows)

    def _write_results(self, conn, run_id, info, sha, at, rows) -> None:
        t = self.t["test_results"]
        fresh = []
        for row in rows:
            result = conn.execute(self._insert(t).values(
                run_id=run_id, repo=info.repo, sha=sha, suite=row["suite"], test=row["test"],
                target=row["target"], backend=row.get("backend") or backend_of(row["suite"], row["target"], row["test"]),
                outcome=row["outcome"], retries=row.get("retries", 0), duration=row.get("duration"),
                at=at).on_conflict_do_nothing(index_elements=["run_id", "suite", "target", "test"])
                .returning(t.c.id)).first()
            if result is not None:  # new, not a redelivery's (rowcount is -1 on psycopg)
                fresh.append(row)
        self._count(conn, info.repo, at, run_id, fresh)

    def _count(self, conn, repo, at, run_id, rows) -> None:
        """Daily health and flaky statistics for results just written (only those)."""
        day = at.date()
        health = defaultdict(lambda: defaultdict(int))
        tests = defaultdict(lambda: [0, 0, 0])
        for row in rows:
            backend = row.get("backend") or backend_of(row["suite"], row["target"], row["test"])
            outcome = row["outcome"]
            bucket = {"passed": "passed", "flaky": "flaky", "skipped": "skipped"}.get(outcome, "failed")
            health[(backend, row["target"])][bucket] += 1
            if outcome != "skipped":
                counts = tests[(row["test"], row["target"])]
                counts[0] += 1
                counts[1] += outcome in ("failed", "error", "flaky")
                counts[2] += outcome == "flaky"
        h = self.t["health_daily"]
        for (backend, target), n in health.items():
            stmt = self._insert(h).values(repo=repo, backend=backend, target=target, day=day,
                                          passed=n["passed"], failed=n["failed"], flaky=n["flaky"],
                                          skipped=n["skipped"])
            conn.execute(stmt.on_conflict_do_update(
                index_elements=["repo", "backend", "target", "day"],
                set_={c: getattr(h.c, c) + getattr(stmt.excluded, c)
                      for c in ("passed", "failed", "flaky", "skipped")}))
        f = self.t["flaky_stats"]
        for (test, target), (runs, failed, flaky) in tests.items():
            stmt = self._insert(f).values(
                repo=repo, test=test, target=target, runs=runs, failures=failed, flaky=flaky,
                rate=flaky / runs, lower=wilson_lower_bound(flaky, runs),
                last_flaky_at=at if flaky else None, last_flaky_run=run_id if flaky else None,
                updated_at=at)
            conn.execute(stmt.on_conflict_do_update(
                index_elements=["repo", "test", "target"],
                set_=dict(runs=f.c.runs + runs, failures=f.c.failures + failed, flaky=f.c.flaky + flaky,
                          updated_at=at,
                          **({"last_flaky_at": at, "last_flaky_run": run_id} if flaky else {}))))
        if tests:  # rate and bound from the new totals
            keys = list(tests)
            rows = conn.execute(select(f.c.test, f.c.target, f.c.runs, f.c.flaky).where(
                f.c.repo == repo, f.c.test.in_({k[0] for k in keys}))).all()
            updates = [dict(b_test=r.test, b_target=r.target, b_rate=r.flaky / r.runs if r.runs else 0.0,
                            b_lower=wilson_lower_bound(r.flaky, r.runs)) for r in rows
                       if (r.test, r.target) in tests]
            if updates:
                conn.execute(f.update().where(f.c.repo == repo, f.c.test == bindparam("b_test"),
                                              f.c.target == bindparam("b_target"))
                             .values(rate=bindparam("b_rate"), lower=bindparam("b_lower")), updates)

    def _write_failures(self, conn, failures: list[dict]) -> None:
        if not failures:
            return
        t = self.t["failure_events"]
        clusterer = self._clusterer(conn)
        touched = set()
        for failure in failures:
            cluster = clusterer.add(Group(failure["fingerprint"], failure["text"], failure["at"]))
            failure["cluster_id"] = cluster.id
            result = conn.execute(self._insert(t).values(**failure).on_conflict_do_nothing(
                index_elements=["run_id", "source", "test", "fingerprint"]).returning(t.c.id)).first()
            if result is not None:
                touched.add(cluster.id)
        self._refresh_clusters(conn, touched, clusterer)

    def _clusterer(self, conn) -> Clusterer:
        c, f = self.t["clusters"], self.t["failure_events"]
        fps = defaultdict(list)
        for cid, fp in conn.execute(select(f.c.cluster_id, f.c.fingerprint).distinct()):
            fps[cid].append(fp)
        existing = [Cluster(row.id, row.text or "", fps.get(row.id, []))
                    for row in conn.execute(select(c.c.id, c.c.text).order_by(c.c.first_seen, c.c.id))]
        return Clusterer(existing)

    def _refresh_clusters(self, conn, ids, clusterer: Clusterer) -> None:
        """Counts, first/last sighting, title, category and a 30-day daily series per cluster."""
        if not ids:
            return
        c, f = self.t["clusters"], self.t["failure_events"]
        ids = sorted(ids)
        stats = {r.cluster_id: r for r in conn.execute(
            select(f.c.cluster_id, func.count().label("n"),
                   func.count(f.c.pr.distinct()).label("prs"),
                   func.sum(func.cast(f.c.pr == TRUNK, Integer)).label("trunk"),
                   func.min(f.c.at).label("first"), func.max(f.c.at).label("last"))
            .where(f.c.cluster_id.in_(ids)).group_by(f.c.cluster_id))}
        samples = {}
        for row in conn.execute(select(f.c.cluster_id, f.c.category, f.c.primary_line, f.c.test)
                                .where(f.c.cluster_id.in_(ids)).order_by(f.c.at.desc())):
            samples.setdefault(row.cluster_id, row)
        daily = defaultdict(dict)
        since = _now() - timedelta(days=30)
        for row in conn.execute(select(f.c.cluster_id, f.c.at).where(
                f.c.cluster_id.in_(ids), f.c.at >= since)):
            day = _as_utc(row.at).date().isoformat()
            daily[row.cluster_id][day] = daily[row.cluster_id].get(day, 0) + 1
        for cid in ids:
            s, sample = stats.get(cid), samples.get(cid)
            if s is None:
                continue
            values = dict(text=clusterer.clusters[cid].text, category=sample.category,
                          title=(sample.primary_line or sample.test or "")[:200],
                          owners=_owners(sample.category), sample_line=sample.primary_line,
                          failures=s.n, prs=s.prs - (1 if s.trunk else 0), trunk_failures=s.trunk or 0,
                          first_seen=s.first, last_seen=s.last, daily=daily.get(cid, {}),
                          updated_at=_now())
            stmt = self._insert(c).values(id=cid, **values)
            conn.execute(stmt.on_conflict_do_update(index_elements=["id"], set_=values))

    def recluster(self) -> dict[str, int]:
        """Every failure clustered again from scratch (oldest fingerprint first): the cluster
        table rebuilt, each failure's cluster id rewritten. Returns counts."""
        f, c = self.t["failure_events"], self.t["clusters"]
        with self.engine.begin() as conn:
            groups = [Group(r.fingerprint, r.text or "", _as_utc(r.first)) for r in conn.execute(
                select(f.c.fingerprint, func.min(f.c.text).label("text"), func.min(f.c.at).label("first"))
                .group_by(f.c.fingerprint))]
            assignment = cluster_groups(groups)
            conn.execute(f.update().where(f.c.fingerprint == bindparam("b_fp"))
                         .values(cluster_id=bindparam("b_cid")),
                         [dict(b_fp=fp, b_cid=cid) for fp, cid in assignment.items()])
            conn.execute(c.delete())
            clusterer = Clusterer()
            for g in sorted(groups, key=lambda g: (g.first_seen, g.fingerprint)):
                clusterer.add(g)
            self._refresh_clusters(conn, set(assignment.values()), clusterer)
        return {"failures": len(groups), "clusters": len(set(assignment.values()))}

    def trunk_cluster(self, primary_line: str, fingerprint: str = "") -> dict | None:
        """The cluster a failure would join when that cluster was seen on trunk: evidence the
        failure is pre-existing (the comment can link it)."""
        return self.trunk_clusters([(primary_line, fingerprint)])[0]

    def clusters_of(self, failures: list[tuple[str, str]], conn=None) -> list[str | None]:
        """The id of the cluster each (primary line, fingerprint) belongs or would join (same
        fingerprint, or a primary line near enough); None where no cluster is near."""
        if conn is None:
            with self.engine.connect() as conn:
                return self.clusters_of(failures, conn)
        clusterer = self._clusterer(conn)
        ids = []
        for primary_line, fingerprint in failures:
            cid = clusterer.by_fingerprint.get(fingerprint) if fingerprint else None
            if cid is None and primary_line:
                found = clusterer.find(cluster_text(primary_line))
                cid = found.id if found else None
            ids.append(cid)
        return ids

    def trunk_clusters(self, failures: list[tuple[str, str]]) -> list[dict | None]:
        """`trunk_cluster` for each (primary line, fingerprint), the clusters read once."""
        c = self.t["clusters"]
        with self.engine.connect() as conn:
            ids = self.clusters_of(failures, conn)
            wanted = sorted({cid for cid in ids if cid is not None})
            rows = {row["id"]: dict(row) for row in conn.execute(
                select(c).where(c.c.id.in_(wanted), c.c.trunk_failures > 0)).mappings()} if wanted else {}
        return [rows.get(cid) for cid in ids]

    # ---- devices ---------------------------------------------------------------------------
    def upsert_device(self, **device) -> None:
        d = self.t["devices"]
        with self.engine.begin() as conn:
            stmt = self._insert(d).values(**device)
            conn.execute(stmt.on_conflict_do_update(
                index_elements=["id"], set_={k: v for k, v in device.items() if k != "id"}))


def _verdict(v: dict) -> dict:
    """A verdict's JSON, flat: the engine's Failure nested under `failure` (tasks.records now)
    or its fields on the verdict itself (reports stored before)."""
    f = v.get("failure") or v
    return dict(suite=v["suite"], test=v["test"], target=v["target"], verdict=v["verdict"],
                category=f.get("category") or "other",
                rule=f.get("decided_by") or f.get("rule") or "",
                confidence=float(f.get("confidence") or 0),
                fingerprint=(f.get("fingerprint") or v["test"])[:100],
                primary_line=f.get("line") or f.get("primary_line") or "",
                line_no=f.get("line_no") if f is not v else None, title=f.get("title") or "",
                suspects=v.get("suspects") or [])


def _as_utc(value):
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value


def _stages(data: dict, suites) -> dict:
    build = float((data.get("build") or {}).get("seconds") or 0)
    ran = sum(float(_field(s, "seconds") or 0) for s in suites)
    total = float(data.get("seconds") or 0)
    return {"build": round(build, 3), "suites": round(ran, 3),
            "plan+classify+compare": round(max(0.0, total - build - ran), 3), "total": round(total, 3)}


@functools.lru_cache(maxsize=None)
def _owners(category: str) -> list[str]:
    """Who owns a category: its owners in triage_rules/categories.yaml, as @handles."""
    entry = (yaml.safe_load((resources.files("triage_rules") / "categories.yaml").read_text())
             .get("categories", {}).get(category) or {})
    return owners_of(entry.get("owners", []), ())


def day_range(days: int, today: date | None = None) -> list[date]:
    today = today or _now().date()
    return [today - timedelta(days=i) for i in range(days - 1, -1, -1)]


class BulkLoad:
    """Many finished runs at once (the seeded database, imports): rows inserted in batches,
    then clusters and statistics computed from the whole history, not run by run."""

    def __init__(self, history: History):
        self.h = history

    def runs(self, conn, rows: list[dict]) -> list[int]:
        t = self.h.t["triage_runs"]
        ids = []
        for start in range(0, len(rows), 2000):
            ids += list(conn.execute(self.h._insert(t).returning(t.c.id, sort_by_parameter_order=True),
                                     rows[start:start + 2000]).scalars())
        return ids

    def rows(self, conn, name: str, rows: list[dict]) -> None:
        for start in range(0, len(rows), 5000):
            conn.execute(self.h.t[name].insert(), rows[start:start + 5000])


def rebuild_stats(history: History) -> None:
    """Daily health and flaky statistics recomputed from every result (after a bulk load)."""
    r, h, f = (history.t[n] for n in ("test_results", "health_daily", "flaky_stats"))
    day = func.date(r.c.at) if history.engine.dialect.name == "sqlite" else func.cast(r.c.at, Date)
    flaky = func.sum(func.cast(r.c.outcome == "flaky", Integer))
    with history.engine.begin() as conn:
        conn.execute(h.delete())
        rows = conn.execute(select(
            r.c.repo, r.c.backend, r.c.target, day.label("day"),
            func.sum(func.cast(r.c.outcome == "passed", Integer)).label("passed"),
            func.sum(func.cast(r.c.outcome.in_(("failed", "error")), Integer)).label("failed"),
            flaky.label("flaky"), func.sum(func.cast(r.c.outcome == "skipped", Integer)).label("skipped"))
            .group_by(r.c.repo, r.c.backend, r.c.target, day)).mappings().all()
        if rows:
            conn.execute(h.insert(), [dict(row, day=row["day"] if isinstance(row["day"], date)
                                           else date.fromisoformat(row["day"])) for row in rows])
        conn.execute(f.delete())
        stats = conn.execute(select(
            r.c.repo, r.c.test, r.c.target, func.count().label("runs"),
            func.sum(func.cast(r.c.outcome.in_(("failed", "error", "flaky")), Integer)).label("failures"),
            flaky.label("flaky"),
            func.max(case((r.c.outcome == "flaky", r.c.at))).label("last_flaky_at"),
            func.max(case((r.c.outcome == "flaky", r.c.run_id))).label("last_flaky_run"))
            .where(r.c.outcome != "skipped").group_by(r.c.repo, r.c.test, r.c.target)).mappings().all()
        now = _now()
        BulkLoad(history).rows(conn, "flaky_stats", [dict(
            s, last_flaky_at=_as_utc(s["last_flaky_at"]), rate=s["flaky"] / s["runs"],
            lower=wilson_lower_bound(s["flaky"], s["runs"]), updated_at=now) for s in stats])
