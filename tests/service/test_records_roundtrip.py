"""Every record goes to JSON and back through the one serialiser (triage_rules.records.dump /
load) without losing anything: the JSON report, the stored full reports and pending publishes
all depend on it. The records are generated from their own type hints, so a field added later
is covered without touching this test."""
from __future__ import annotations

import dataclasses
import json
import types
import typing

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.store import Store
from tasks import records
from tasks.records import (BaseRun, BuildResult, ChangedFile, CiReport, CommitEnvironment, Plan, Report,
                           SelectedTest, Suspect, SuiteResult, Verdict)
from tasks.service import report_payload
from tasks.summary import PublishPayload
from triage_rules.records import Failure, Frame, dump, load

RECORDS = [Failure, Frame, ChangedFile, SelectedTest, Plan, BuildResult, records.TestResult, SuiteResult,
           BaseRun, Suspect, Verdict, Report, CiReport, PublishPayload, CommitEnvironment]
TEXT = st.text(max_size=12)
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | TEXT
                           | st.floats(allow_nan=False),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                           max_leaves=6)
SCALARS = {str: TEXT, int: st.integers(), bool: st.booleans(), float: st.floats(allow_nan=False),
           type(None): st.none(), dict: st.dictionaries(TEXT, JSON_VALUES, max_size=3)}


def strategy(kind) -> st.SearchStrategy:
    """Values of `kind` (a record class or a typing form) as the record's hints describe them."""
    if dataclasses.is_dataclass(kind):
        hints = typing.get_type_hints(kind)
        return st.builds(kind, **{f.name: strategy(hints[f.name]) for f in dataclasses.fields(kind)})
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (types.UnionType, typing.Union):
        return st.one_of([strategy(a) for a in args])
    if origin is list:
        return st.lists(strategy(args[0]), max_size=2)
    if origin is dict:
        return st.dictionaries(strategy(args[0]), strategy(args[1]), max_size=2)
    return SCALARS[kind]


@pytest.mark.parametrize("kind", RECORDS, ids=lambda k: k.__name__)
def test_every_record_survives_json(kind):
    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(strategy(kind))
    def round_trip(record):
        text = json.dumps(dump(record))
        assert load(kind, json.loads(text)) == record
        if hasattr(kind, "from_dict"):  # the records' own methods are the same pair
            assert kind.from_dict(json.loads(json.dumps(record.to_dict()))) == record

    round_trip()


def test_a_verdict_holds_its_failure_whole():
    failure = Failure(line="RuntimeError: boom", line_no=7, test="t::a", frames=[Frame("a.py", 3, "f")],
                      fingerprint="abc", category="runtime_error", looks_like=[{"similarity": 0.5}])
    verdict = Verdict(suite="s", test="t::a", target="host", base="passed", head="failed", verdict="new",
                      failure=failure)
    data = dump(verdict)
    assert data["failure"] == dump(failure) and "category" not in data  # no copies beside it
    again = load(Verdict, json.loads(json.dumps(data)))
    assert again.failure == failure and isinstance(again.failure.frames[0], Frame)
    assert (again.category, again.fingerprint, again.primary_line) == ("runtime_error", "abc", "RuntimeError: boom")


def test_older_stored_reports_still_load():
    """A key the record no longer has is skipped; a missing one takes its default."""
    data = dump(BuildResult(status="ok", kind="overlay", commit="c"))
    data["gone"] = 1
    del data["failures"]
    assert load(BuildResult, data) == BuildResult(status="ok", kind="overlay", commit="c")


def test_a_report_stored_before_verdicts_held_their_failure_still_renders():
    """`/etriage ignore` after an upgrade renders the run's stored report again: its verdicts
    have the old flat fields (skipped) and no Failure."""
    plan = Plan(base="b", head="h", merge_base="m", changed_files=[], areas=[], backends=[], suites=["probes"],
                targets=["host"], recipes=[])
    stored = dump(Report(base="b", head="h", merge_base="m", plan=plan,
                         build=BuildResult(status="ok", kind="overlay", commit="h"), results=[], suites=[],
                         summary={"new": 1}))
    stored["results"] = [{"suite": "probes", "test": "t::a", "target": "host", "base": "passed", "head": "failed",
                          "verdict": "new", "category": "mutable_buffer", "primary_line": "boom",
                          "fingerprint": "abc", "suspects": [{"path": "a.py", "symbol": "f", "score": 1.0}]}]
    still_new = report_payload("h", Report.from_dict(stored))
    assert still_new.check_conclusion == "failure" and still_new.annotations[0]["message"] == "t::a"
    payload = report_payload("h", Report.from_dict(stored), ignored={"t::a": "known"})
    assert payload.check_conclusion == "success" and payload.counts == {"ignored": 1}
    assert "known" in payload.section


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    db = Store(f"sqlite:///{tmp_path_factory.mktemp('db') / 'etriage.db'}")
    yield db
    db.close()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(report=strategy(Report), payload=strategy(PublishPayload), ci=strategy(CiReport))
def test_stored_reports_and_pending_payloads_come_back_equal(store, report, payload, ci):
    run_id = store.start_run("o/r", 1, "h", "pr")
    store.update_run(run_id, report={"full": dump(report), "ci": dump(ci)})
    stored = store.run(run_id)["report"]
    assert Report.from_dict(stored["full"]) == report and CiReport.from_dict(stored["ci"]) == ci
    store.save_pending_report("o/r", 1, payload.kind, payload.head_sha, None, payload.to_dict())
    [row] = [r for r in store.pending_reports() if r["kind"] == payload.kind]
    assert PublishPayload.from_dict(row["payload"]) == payload
    store.clear_pending_report("o/r", 1, payload.kind, payload.head_sha)
