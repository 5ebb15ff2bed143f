"""The history the dashboard reads: migrations, a Report recorded, clusters, flaky statistics,
abandoned runs and their retry, on SQLite and PostgreSQL."""
from __future__ import annotations

import uuid
from dataclasses import fields
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import inspect, select, text

from bot.history import TABLES, History, RunInfo
from bot.store import Store
from triage_rules import Failure
from triage_rules.fingerprint import fingerprint
from tasks.records import BuildResult, Plan, Report, SuiteResult, Suspect, Verdict
from tasks.records import TestResult as Outcome

KV_LINE = "AssertionError: buffer 'k_cache' was folded into a constant _frozen_param{n}"
ROUTE = ("ProbeFailure: [multi_method_lowering] partitioner map routed wrongly: method 'decode' was "
         "given NoDelegationPartitioner but was lowered to ['XnnpackBackend'] (run {n})")


def verdict(test, target, judged, line) -> Verdict:
    failure = Failure(line=line, line_no=3, test=test, fingerprint=fingerprint(line), category="mutable_buffer",
                      decided_by="model", confidence=0.8)
    suspects = [Suspect("exir/passes/constant_prop_pass.py", "constant_prop_pass", 3.0, line=42)]
    if "failure" in {f.name for f in fields(Verdict)}:
        return Verdict("mutable_buffer", test, target, base="passed", head="failed", verdict=judged,
                       failure=failure, suspects=suspects)
    return Verdict("mutable_buffer", test, target, base="passed", head="failed", verdict=judged,  # before the records refactor
                   category="mutable_buffer", primary_line=line, fingerprint=failure.fingerprint,
                   decided_by="model", confidence=0.8, suspects=suspects)


def make_report(head: str, *, failing: dict[str, tuple[str, str]], passing=("t::ok",),
                target="host", seconds=12.0) -> Report:
    """failing: test -> (verdict, primary line)."""
    tests = [Outcome("mutable_buffer", t, target, "passed", seconds=0.5) for t in passing]
    tests += [Outcome("mutable_buffer", t, target, "passed" if v == "flaky" else "failed", seconds=1.0)
              for t, (v, _) in failing.items()]
    verdicts = [verdict(t, target, v, line) for t, (v, line) in failing.items()]
    plan = Plan("b", head, "mb", [], ["exir"], ["portable"], ["mutable_buffer"], [target], [])
    return Report("b", head, "mb", plan, BuildResult("ok", "overlay", head, seconds=2.0), verdicts,
                  [SuiteResult("mutable_buffer", target, head, "ran", tests=tests, seconds=6.0)],
                  {"new": sum(v == "new" for v, _ in failing.values())}, seconds=seconds)


def _rows(history, name):
    t = history.t[name]
    with history.engine.connect() as conn:
        return [dict(r) for r in conn.execute(select(t)).mappings()]


def test_a_report_lands_with_results_failures_and_a_cluster(history):
    report = make_report("h1", failing={"t::kv": ("new", KV_LINE.format(n=0))})
    run_id = history.record_run(report, RunInfo("o/r", 7, title="<script>x</script>", author="a"))
    assert history.record_run(report, RunInfo("o/r", 7)) == run_id  # a redelivery writes nothing twice
    run = history.run(run_id)
    assert run["status"] == "completed" and run["conclusion"] == "failure"
    assert run["stage_seconds"]["build"] == 2.0 and run["stage_seconds"]["suites"] == 6.0
    results = _rows(history, "test_results")
    assert sorted((r["test"], r["outcome"]) for r in results) == [("t::kv", "failed"), ("t::ok", "passed")]
    [failure] = _rows(history, "failure_events")
    assert (failure["verdict"], failure["category"], failure["rule"]) == ("new", "mutable_buffer", "model")
    assert failure["suspects"][0]["path"] == "exir/passes/constant_prop_pass.py"
    [cluster] = _rows(history, "clusters")
    assert failure["cluster_id"] == cluster["id"] and cluster["failures"] == 1 and cluster["prs"] == 1
    assert "@JacobSzwejbka" in cluster["owners"]  # exir/passes/ owns mutable_buffer
    health = _rows(history, "health_daily")
    assert [(h["backend"], h["target"], h["passed"], h["failed"]) for h in health] == [("portable", "host", 1, 1)]


def test_the_stored_json_is_recorded_like_the_report(history):
    report = make_report("h2", failing={"t::kv": ("pre_existing", KV_LINE.format(n=1))})
    from dataclasses import asdict

    run_id = history.record_run(asdict(report), RunInfo("o/r", 8))
    assert {r["test"] for r in _rows(history, "test_results")} == {"t::kv", "t::ok"}
    assert history.run(run_id)["conclusion"] == "success"


def test_failures_across_prs_and_trunk_cluster_and_trunk_is_evidence(history):
    history.record_run(make_report("t1", failing={"t::kv": ("new", KV_LINE.format(n=0))}),
                       RunInfo("o/r", 0, trigger="push"))  # trunk
    history.record_run(make_report("h3", failing={"t::kv": ("new", KV_LINE.format(n=5))}), RunInfo("o/r", 9))
    history.record_run(make_report("h4", failing={"t::route": ("new", ROUTE.format(n=1))}), RunInfo("o/r", 10))
    history.record_run(make_report("h5", failing={"t::route": ("new", ROUTE.format(n=2))}), RunInfo("o/r", 11))
    clusters = sorted(_rows(history, "clusters"), key=lambda c: c["failures"])
    assert [(c["failures"], c["prs"], c["trunk_failures"]) for c in clusters] == [(2, 1, 1), (2, 2, 0)]
    kv = next(c for c in clusters if c["trunk_failures"])
    assert history.trunk_cluster(KV_LINE.format(n=77))["id"] == kv["id"]
    assert history.trunk_cluster(ROUTE.format(n=3)) is None  # seen on PRs only
    assert history.trunk_cluster("SegFault in something else entirely") is None
    before = {c["id"] for c in clusters}
    assert history.recluster() == {"failures": 3, "clusters": 2}
    assert {c["id"] for c in _rows(history, "clusters")} == before  # stable ids


def test_flaky_statistics_with_wilson_bound(history):
    for i in range(4):
        failing = {"t::sometimes": ("flaky", "RuntimeError: timed out")} if i % 2 else {}
        history.record_run(make_report(f"h{i}", failing=failing, passing=("t::ok",) + (() if i % 2 else ("t::sometimes",))),
                           RunInfo("o/r", 20 + i))
    stats = {r["test"]: r for r in _rows(history, "flaky_stats")}
    s = stats["t::sometimes"]
    assert (s["runs"], s["flaky"], s["rate"]) == (4, 2, 0.5)
    assert 0.1 < s["lower"] < 0.5 and s["last_flaky_run"] is not None
    assert stats["t::ok"]["flaky"] == 0 and stats["t::ok"]["lower"] == 0.0


def test_a_run_past_its_time_limit_is_abandoned_and_can_be_retried(history):
    start = datetime.now(timezone.utc) - timedelta(hours=3)
    stuck = history.start_run(RunInfo("o/r", 30, started_at=start), head_sha="h30", time_limit=timedelta(hours=1))
    fresh = history.start_run(RunInfo("o/r", 31), head_sha="h31")
    assert history.abandon_overdue() == [stuck]
    assert history.run(fresh)["status"] == "running"
    with pytest.raises(ValueError):
        history.retry(fresh)
    again = history.retry(stuck)
    new = history.run(again)
    assert (new["status"], new["attempt"], new["retry_of"], new["trigger"]) == ("queued", 2, stuck, "retry")


def test_migration_from_the_0001_schema_keeps_rows(request, tmp_path):
    """A database at 0001 (with data) upgrades to 0002 without losing a row, on both databases."""
    for url, prefix in _databases(request, tmp_path):
        from bot import store as store_module

        engine = store_module._engine(url)
        store_module.migrate(engine, prefix, revision="0001")
        with engine.begin() as conn:
            conn.execute(text(f'INSERT INTO "{prefix}ignored_failures" (repo, pr, key, reason) '
                              "VALUES ('o/r', 1, 'abc', 'kept')"))
            assert conn.execute(text(f'SELECT version_num FROM "{prefix}alembic_version"')).scalar() == "0001"
        assert f"{prefix}triage_runs" not in inspect(engine).get_table_names()
        store_module._MIGRATED.clear()
        store = Store(url, prefix=prefix)
        try:
            History(store)
            assert store.ignored_failures("o/r", 1) == {"abc": "kept"}
            assert {f"{prefix}{t}" for t in TABLES} <= set(inspect(store.engine).get_table_names())
        finally:
            store.drop_all()
        engine.dispose()


def _databases(request, tmp_path):
    yield f"sqlite:///{tmp_path / 'old.db'}", ""
    try:
        url = request.getfixturevalue("postgres_url")
    except pytest.skip.Exception:
        return
    yield url, f"t{uuid.uuid4().hex[:10]}_"


def test_an_overdue_run_shows_as_abandoned_before_anything_writes_it(history):
    from bot.dashboard.queries import Dashboard, Viewer

    start = datetime.now(timezone.utc) - timedelta(hours=3)
    stuck = history.start_run(RunInfo("o/r", 40, started_at=start, title="stuck"), head_sha="h40",
                              time_limit=timedelta(hours=1))
    dashboard = Dashboard(history)
    assert history.run(stuck)["status"] == "running"  # nothing wrote it yet
    assert dashboard.run(stuck, Viewer())["run"]["status"] == "abandoned"
    assert dashboard.pr("o/r", 40, Viewer())["pushes"][0]["status"] == "abandoned"


def test_a_retry_is_completed_by_the_next_recorded_report(history):
    start = datetime.now(timezone.utc) - timedelta(hours=3)
    stuck = history.start_run(RunInfo("o/r", 50, started_at=start), head_sha="h50", time_limit=timedelta(hours=1))
    history.abandon_overdue()
    again = history.retry(stuck)
    report = make_report("h50", failing={"t::kv": ("new", KV_LINE.format(n=4))})
    assert history.record_run(report, RunInfo("o/r", 50)) == again  # the queued attempt, not a new row
    assert history.run(again)["status"] == "completed" and history.run(stuck)["status"] == "abandoned"
    assert history.record_run(report, RunInfo("o/r", 50)) == again  # redelivered: nothing new
    assert len([r for r in _rows(history, "test_results") if r["run_id"] == again]) == 2


def test_the_seed_is_deterministic_and_its_clusters_stable(tmp_path, shared_dir):
    from etriage.seed import seed

    now = datetime(2026, 11, 30, 12, tzinfo=timezone.utc)
    made = []
    for name in ("a", "b"):
        store = Store(f"sqlite:///{tmp_path / name}.db")
        history = History(store)
        counts = seed(history, runs=120, results=2400, now=now, shared=shared_dir)
        made.append((counts, sorted((c["id"], c["failures"]) for c in _rows(history, "clusters"))))
        if name == "b":  # re-clustering the same history keeps every id
            history.recluster()
            assert sorted((c["id"], c["failures"]) for c in _rows(history, "clusters")) == made[-1][1]
        store.close()
    assert made[0] == made[1] and made[0][0]["clusters"] > 5


def test_the_comment_notes_a_new_failure_whose_cluster_failed_on_trunk(history):
    from tasks.service import report_payload, trunk_notes

    history.record_run(make_report("t1", failing={"t::kv": ("new", KV_LINE.format(n=0))}),
                       RunInfo("o/r", 0, trigger="push"))  # trunk
    history.record_run(make_report("h4", failing={"t::route": ("new", ROUTE.format(n=1))}), RunInfo("o/r", 10))
    [kv] = [c for c in _rows(history, "clusters") if c["trunk_failures"]]
    head = make_report("h9", failing={"t::kv2": ("new", KV_LINE.format(n=41)), "t::route": ("new", ROUTE.format(n=9)),
                                      "t::other": ("new", "SegFault in something else entirely")})
    notes = trunk_notes(history, head, "https://etriage.example")
    assert len(notes) == 1  # the route failure was seen on PRs only, the other one nowhere
    assert notes[0].startswith("`t::kv2` looks like a failure already seen on trunk (1 trunk failure(s), last ")
    assert f"https://etriage.example/dashboard/clusters/{kv['id']}" in notes[0]
    assert f"cluster `{kv['id']}`" in trunk_notes(history, head)[0]  # no public URL: the id
    section = report_payload("h9", head, notes, links=("https://etriage.example",)).section
    # quoted under the section's title (through bot.md: the link, ours, is the one kept)
    assert f"> `t::kv2` looks like a failure already seen on trunk (1 trunk failure(s), last " in section
    assert f"<https://etriage.example/dashboard/clusters/{kv['id']}>. It may be" in section
