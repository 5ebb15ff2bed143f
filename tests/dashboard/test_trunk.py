"""Trunk now and the commits x jobs grid on a history written by hand (SQLite and PostgreSQL):
which tests are red, since which commit (the oldest of the streak, up to the last pass), and
each cell's state from outcomes and verdicts; environment and flaky failures never make trunk
red; a test that ran before the streak but not at some commits is judged by the commits it ran at."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from bot.dashboard.queries import Dashboard, Filters, Viewer
from bot.dashboard.trunk import cell_state
from bot.history import BulkLoad

REPO = "pytorch/executorch"
T0 = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(days=2)
QNN = "backends/qualcomm/tests/test_qnn_delegate.py::TestQNNQuantizedOperator::test_qnn_backend_"
# per commit (oldest first): test -> (outcome, verdict)
HISTORY = [
    {"rms_norm": ("passed", None), "cat": ("failed", "new"), "sdpa": ("passed", None), "conv2d": ("passed", None)},
    {"rms_norm": ("passed", None), "cat": ("failed", "pre_existing"), "sdpa": ("failed", "new"), "conv2d": ("passed", None)},
    {"rms_norm": ("failed", "new"), "cat": ("failed", "pre_existing"), "sdpa": ("passed", None)},  # conv2d did not run
    {"rms_norm": ("failed", "pre_existing"), "cat": ("failed", "pre_existing"), "sdpa": ("passed", None),
     "conv2d": ("failed", "environment")},
    {"rms_norm": ("failed", "pre_existing"), "cat": ("failed", "pre_existing"), "sdpa": ("flaky", "flaky"),
     "conv2d": ("failed", "environment")},
]


def write(history, commits=HISTORY, target="android-sm8750"):
    shas = [f"{k + 1:x}" * 40 for k in range(len(commits))]
    runs = [dict(key=f"{REPO}#0@{sha}:pr:1", repo=REPO, pr=0, head_sha=sha, base_sha=shas[k - 1] if k else "0" * 40,
                 trigger="push", kind="pr", status="completed", started_at=T0 + timedelta(hours=k))
            for k, sha in enumerate(shas)]
    bulk = BulkLoad(history)
    with history.engine.begin() as conn:
        ids = bulk.runs(conn, runs)
        results, failures = [], []
        for run_id, sha, tests in zip(ids, shas, commits):
            for name, (outcome, verdict) in tests.items():
                at = T0 + timedelta(hours=ids.index(run_id), minutes=5)
                results.append(dict(run_id=run_id, repo=REPO, sha=sha, suite="qnn", test=QNN + name, target=target,
                                    backend="qualcomm", outcome=outcome, retries=0, duration=1.0, at=at))
                if verdict:
                    failures.append(dict(run_id=run_id, repo=REPO, pr=0, sha=sha, source=f"etriage:qnn@{target}",
                                         test=QNN + name, target=target, backend="qualcomm", verdict=verdict,
                                         category="qnn_op_validation", fingerprint=f"fp-{name}",
                                         primary_line=f"[ERROR] [Qnn ExecuTorch]: {name} failed", at=at))
        bulk.rows(conn, "test_results", results)
        bulk.rows(conn, "failure_events", failures)
    return ids, shas


def test_red_since_the_oldest_commit_of_each_streak(history):
    ids, shas = write(history)
    trunk = Dashboard(history).trunk(Filters(), Viewer())
    assert trunk["repo"] == REPO and trunk["red"]
    failing = {x["test"].rsplit("_", 1)[-1]: x for x in trunk["failing"]}
    assert set(failing) == {"cat", "norm"}  # sdpa: flaky now; conv2d: the environment's
    cat, norm = failing["cat"], failing["norm"]
    assert (cat["since_sha"], cat["since_exact"], cat["commits_red"], cat["last_green_sha"]) == (shas[0], False, 5, None)
    assert (norm["since_sha"], norm["since_exact"], norm["commits_red"], norm["last_green_sha"]) == (shas[2], True, 3, shas[1])
    assert norm["run_id"] == ids[-1] and norm["since_run"] == ids[2] and norm["failure_id"]
    assert trunk["since"]["sha"] == shas[0] and trunk["since"]["commits"] == 5  # the longest streak
    assert trunk["latest"]["sha"] == shas[-1]
    assert (trunk["environment"], trunk["flaky"]) == (0, 0)  # one job: red wins its cell


def test_grid_cells_per_commit_and_job(history):
    ids, shas = write(history)
    trunk = Dashboard(history).trunk(Filters(), Viewer())
    assert trunk["jobs"] == [{"target": "android-sm8750", "suite": "qnn"}]
    assert [c["sha"] for c in trunk["commits"]] == shas[::-1]  # newest first
    assert [c["cells"][0]["state"] for c in trunk["commits"]] == ["red"] * 5
    assert [c["cells"][0]["run_id"] for c in trunk["commits"]] == ids[::-1]
    assert trunk["commits"][0]["cells"][0]["tests"] == 4 and trunk["commits"][0]["cells"][0]["not_passed"] == 4


def test_environment_and_flaky_failures_do_not_make_trunk_red(history):
    commits = [{"conv2d": ("passed", None), "sdpa": ("passed", None)},
               {"conv2d": ("failed", "environment"), "sdpa": ("passed", None)},
               {"conv2d": ("passed", None), "sdpa": ("flaky", "flaky")}]
    write(history, commits)
    trunk = Dashboard(history).trunk(Filters(), Viewer())
    assert not trunk["red"] and trunk["failing"] == [] and trunk["since"] is None
    assert [c["cells"][0]["state"] for c in trunk["commits"]] == ["flaky", "environment", "green"]
    assert trunk["flaky"] == 1


def test_a_fixed_test_is_not_failing_now(history):
    commits = [{"cat": ("failed", "new")}, {"cat": ("failed", "pre_existing")}, {"cat": ("passed", None)}]
    write(history, commits)
    trunk = Dashboard(history).trunk(Filters(), Viewer())
    assert not trunk["red"] and [c["cells"][0]["state"] for c in trunk["commits"]] == ["green", "red", "red"]


def test_filters_and_an_unreadable_repository(history):
    write(history)
    dashboard = Dashboard(history)
    assert dashboard.trunk(Filters(target="host"), Viewer())["commits"][0]["cells"] == []
    assert dashboard.trunk(Filters(category="lint"), Viewer())["failing"] == []
    hidden = dashboard.trunk(Filters(), Viewer(hidden=frozenset({REPO})))
    assert hidden["repo"] is None and hidden["commits"] == [] and not hidden["red"]
    assert dashboard.trunk(Filters(repo=REPO), Viewer(hidden=frozenset({REPO})))["commits"] == []


def test_no_trunk_run_recorded(history):
    trunk = Dashboard(history).trunk(Filters(), Viewer())
    assert trunk["repo"] is None and trunk["latest"] is None and trunk["commits"] == []


def test_cell_states():
    assert cell_state({("passed", None): 3}) == "green"
    assert cell_state({("failed", "new"): 1, ("failed", "environment"): 1}) == "red"
    assert cell_state({("failed", None): 1}) == "red"  # a failure without a verdict is the code's
    assert cell_state({("error", "pre_existing"): 1}) == "red"
    assert cell_state({("failed", "environment"): 2, ("flaky", "flaky"): 1}) == "environment"
    assert cell_state({("flaky", "flaky"): 1, ("passed", None): 5}) == "flaky"
    assert cell_state({("failed", "ignored"): 1}) == "green"  # a maintainer's /etriage ignore
    assert cell_state({("skipped", None): 2}) == "green"
