"""The seeded history is coherent: trunk is a chain of commits in time order, every result and
failure lies within its run, each failure strikes only tests of its own area (no QNN error under
an XNNPACK test, no other project's error anywhere), a PR's regressions are of its own area, and
trunk is red now since a known commit."""
from __future__ import annotations

import json

from sqlalchemy import select

from bot.history import TRUNK
from etriage.seed import AREA_BY_TEXT, AREAS, NOT_A_TEST_FAILURE, PUBLIC, _area_of_test
from triage_rules import corpus
from triage_rules.cluster import cluster_text

SUITE_OF = {"etriage:" + s: s for s in ("qnn", "multi_method", "mutable_buffer", "index_put", "probes")}


def _rows(history, name, *columns):
    t = history.t[name]
    with history.engine.connect() as conn:
        return conn.execute(select(*(t.c[c] for c in columns)) if columns else select(t)).mappings().all()


def test_trunk_is_a_chain_of_commits_in_time_order(seeded_sqlite):
    runs = sorted((r for r in _rows(seeded_sqlite, "triage_runs") if r["pr"] == TRUNK), key=lambda r: r["id"])
    assert len(runs) >= 8 and all(r["repo"] == PUBLIC for r in runs)
    for before, after in zip(runs, runs[1:]):
        assert after["base_sha"] == before["head_sha"]  # each commit's parent is the one before
        assert after["started_at"] > before["started_at"]


def test_results_and_failures_lie_within_their_run(seeded_sqlite):
    runs = {r["id"]: r for r in _rows(seeded_sqlite, "triage_runs")}
    for name in ("test_results", "failure_events"):
        for row in _rows(seeded_sqlite, name, "run_id", "at", "sha"):
            run = runs[row["run_id"]]
            assert row["sha"] == run["head_sha"]
            assert run["started_at"] <= row["at"], (name, row)
            if run["finished_at"] is not None:
                assert row["at"] <= run["finished_at"], (name, row)
    prs = {}
    for run in sorted(runs.values(), key=lambda r: r["started_at"]):
        if run["pr"] != TRUNK:  # a PR's pushes keep its merge base from trunk's past
            prs.setdefault((run["repo"], run["pr"]), []).append(run)
    trunk_at = {r["head_sha"]: r["started_at"] for r in runs.values() if r["pr"] == TRUNK}
    for pushes in prs.values():
        assert all(trunk_at[p["base_sha"]] <= p["started_at"] for p in pushes if p["repo"] == PUBLIC)


def test_each_failure_strikes_only_tests_of_its_own_area(seeded_sqlite):
    failures = _rows(seeded_sqlite, "failure_events")
    assert len(failures) > 50
    for f in failures:
        area = _area_of_test(SUITE_OF[f["source"].split("@")[0]], f["test"])
        qnn_text = AREA_BY_TEXT[1][0].search(f["primary_line"])
        if f["verdict"] == "environment":
            assert f["category"] in ("qnn_sdk_or_toolchain", "device_infra", "ci_infra", "import_or_env")
            continue
        if qnn_text or f["category"] in ("qnn_op_validation", "qnn_sdk_or_toolchain"):
            assert area == "qnn", f
        elif f["category"] == "multi_method_lowering":  # (a QNN multi-method failure is QNN's)
            assert area in ("multi_method", "qnn"), f
        assert f["category"] not in NOT_A_TEST_FAILURE


def test_no_other_project_s_failure_text(seeded_sqlite):
    foreign, own = set(), set()
    for path in (corpus.TRAIN_FILE, corpus.EVAL_FILE):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            text = cluster_text(record["failure_line"])
            (own if "pytorch/executorch" in record["source"] else foreign).add(text)
    foreign -= own  # a generic line ("TypeError: 'NoneType' object is not iterable") is ExecuTorch's too
    seeded = {cluster_text(f["primary_line"]) for f in _rows(seeded_sqlite, "failure_events", "primary_line")}
    assert seeded and not seeded & foreign


def test_a_pr_s_new_failures_are_of_its_area(seeded_sqlite):
    runs = {r["id"]: r for r in _rows(seeded_sqlite, "triage_runs")}
    area_of_title = {title: name for name, area in AREAS.items() for title in area.titles}
    checked = 0
    for f in _rows(seeded_sqlite, "failure_events"):
        if f["verdict"] == "new" and f["pr"] != TRUNK:
            area = area_of_title[runs[f["run_id"]]["title"]]
            assert _area_of_test(SUITE_OF[f["source"].split("@")[0]], f["test"]) == area
            assert all(s["path"] in {p for p, _ in AREAS[area].files} for s in f["suspects"])
            checked += 1
    assert checked > 10


def test_trunk_is_red_now_since_a_known_commit(client):
    trunk = client.get("/api/trunk").get_json()
    assert trunk["red"] and trunk["since"]["exact"] and trunk["since"]["commits"] >= 2
    assert {x["target"] for x in trunk["failing"]} == {"android-sm8750"}
    assert all(x["suite"] == "qnn" and "test_qnn_delegate.py" in x["test"] for x in trunk["failing"])  # a QNN break
