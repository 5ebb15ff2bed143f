"""The Store on SQLite and on PostgreSQL (a table prefix per test, dropped afterwards)."""
from __future__ import annotations

import socket
import uuid
from datetime import timedelta

import pytest

from bot.history import History
from bot.store import Store
from tasks.records import TestResult as Outcome
from triage_rules import Failure


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path):
    if request.param == "sqlite":
        db = Store(f"sqlite:///{tmp_path / 'etriage.db'}")
    else:
        url = request.getfixturevalue("postgres_url")
        db = Store(url, prefix=f"t{uuid.uuid4().hex[:10]}_")
    History(db)  # the dashboard's tables (migration 0002) join the store's MetaData: compared, dropped
    yield db
    db.drop_all()


def failure(fingerprint, category="mutable_buffer", test="t::a"):
    return Failure(line="RuntimeError: boom", line_no=3, test=test, fingerprint=fingerprint,
                   category=category)


def test_results_are_unique_per_head_suite_target_test(store):
    result = Outcome(suite="probe", test="t::a", target="host", outcome="failed", message="boom", seconds=1.5)
    store.record_results("o/r", "h1", [result])
    store.record_results("o/r", "h1", [Outcome(suite="probe", test="t::a", target="host",  # a redelivered run
                                               outcome="passed", seconds=2.0)])
    [only] = store.results_for("o/r", "h1")
    assert (only["outcome"], only["duration"], only["details"]) == ("passed", 2.0, {"message": ""})


def test_runs_are_reused_per_head_and_kind(store):
    first = store.start_run("o/r", 1, "h1", "pr")
    assert store.start_run("o/r", 1, "h1", "pr") == first
    assert store.start_run("o/r", 1, "h1", "ci") != first
    store.update_run(first, check_run_id=99, report={"blame_categories": ["lint"]})
    assert store.run(first)["report"] == {"blame_categories": ["lint"]}
    assert store.expire_runs(timedelta(hours=-1)) == 2
    assert {r["status"] for r in store.runs_for("o/r", 1)} == {"expired"}


def test_failures_pull_requests_and_lookup(store):
    store.record_pull("o/r", 1, "h1", base_sha="b1", installation_id=5)
    store.record_failures("o/r", "h1", "ci:job", [failure("abcdef1234"), failure("fedcba9876", test="t::b")])
    store.record_failures("o/r", "h1", "ci:job", [failure("abcdef1234")])
    assert store.failure_fingerprints("o/r", "h1") == {"abcdef1234", "fedcba9876"}
    assert store.pulls_with_head("o/r", "h1") == [1]
    assert store.find_failure("o/r", 1, "2")["fingerprint"] == "fedcba9876"
    assert store.find_failure("o/r", 1, "abcdef")["test"] == "t::a"
    assert store.find_failure("o/r", 1, "t::b")["fingerprint"] == "fedcba9876"
    assert store.find_failure("o/r", 1, "zzzzzz") is None
    store.close_pull("o/r", 1)
    assert store.pulls_with_head("o/r", "h1") == []


def test_pending_reports_count_attempts_and_clear_per_head(store):
    store.save_pending_report("o/r", 1, "pr", "h1", 5, {"section": "x"})
    [pending] = store.pending_reports()
    assert pending["attempts"] == 0 and pending["last_error"] == "not yet published"
    store.pending_report_failed("o/r", 1, "pr", "h1", "502")
    store.save_pending_report("o/r", 1, "pr", "h1", 5, {"section": "x"})  # saved again before a retry
    store.pending_report_failed("o/r", 1, "pr", "h1", "rate limited")
    [pending] = store.pending_reports()
    assert pending["attempts"] == 2 and pending["last_error"] == "rate limited"  # one per failed try
    store.pending_report_failed("o/r", 1, "pr", "h0", "other head")  # not this report's head: no count
    assert store.pending_reports()[0]["attempts"] == 2
    store.save_pending_report("o/r", 1, "pr", "h2", 5, {"section": "y"})  # a newer head starts again
    assert store.pending_reports()[0]["attempts"] == 0
    store.save_pending_report("o/r", 1, "pr", "h1", 5, {"section": "x"})
    store.clear_pending_report("o/r", 1, "pr", "h0")  # another head: kept
    assert store.pending_reports()
    store.clear_pending_report("o/r", 1, "pr", "h1")
    assert store.pending_reports() == []


def test_command_state(store):
    store.approve_for_devices("o/r", 1, "h1", "maint")
    assert store.is_approved_for_devices("o/r", 1, "h1")
    assert not store.is_approved_for_devices("o/r", 1, "h2")
    store.ignore_failure("o/r", 1, "abc", "flaky on CI", "maint")
    store.ignore_failure("o/r", 1, "abc", "known issue #12", "maint")
    assert store.ignored_failures("o/r", 1) == {"abc": "known issue #12"}
    store.audit("o/r", 1, "maint", "/etriage rerun", "accepted")
    assert [(a["actor"], a["outcome"]) for a in store.audit_log("o/r", 1)] == [("maint", "accepted")]
    store.record_installation(5, "octo", "created")
    store.record_installation(5, "octo", "suspend")
    assert store.installation(5)["action"] == "suspend"


def test_migrations_from_an_empty_database_give_exactly_the_stores_tables(store):
    """The newest migration and the tables the code uses never drift apart: autogenerate finds
    nothing to change, on SQLite and on PostgreSQL."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext
    from sqlalchemy import inspect, text

    with store.engine.connect() as conn:
        version = conn.execute(text(f'SELECT version_num FROM "{store.prefix}alembic_version"')).scalar()
        assert version == "0006"
        context = MigrationContext.configure(conn)
        diffs = [d for d in compare_metadata(context, store.metadata) if not _elsewhere(d, store.prefix)]
    assert diffs == []
    names = set(inspect(store.engine).get_table_names())
    assert {f"{store.prefix}{t}" for t in store.t} | {f"{store.prefix}alembic_version"} <= names


def _elsewhere(diff, prefix: str) -> bool:
    """A table (or its index) of the shared database's other tests, or our version table."""
    if diff[0] not in ("remove_table", "remove_index"):
        return False
    table = diff[1].name if diff[0] == "remove_table" else diff[1].table.name
    return not table.startswith(prefix) or table == f"{prefix}alembic_version"


def test_a_database_made_before_migrations_is_adopted_as_it_is(tmp_path):
    """A file whose tables create_all made (no version table) upgrades without losing a row."""
    from sqlalchemy import MetaData, create_engine

    from bot.store import _tables

    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = create_engine(url)
    metadata = MetaData()
    tables = _tables(metadata, "")
    metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(tables["ignored_failures"].insert().values(repo="o/r", pr=1, key="abc", reason="kept"))
    engine.dispose()
    store = Store(url)
    try:
        assert store.ignored_failures("o/r", 1) == {"abc": "kept"}
        store.ignore_failure("o/r", 1, "def", "new row", "m")
        assert len(store.ignored_failures("o/r", 1)) == 2
    finally:
        store.close()


def _open_store(url: str) -> str:
    try:
        Store(url).close()
        return "ok"
    except Exception as error:  # reported to the test, which names it
        return f"{type(error).__name__}: {error}"


def test_processes_starting_together_migrate_one_at_a_time(tmp_path):
    """Web and worker processes open a fresh database at the same moment: every one succeeds."""
    import multiprocessing

    url = f"sqlite:///{tmp_path / 'race.db'}"
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        outcomes = pool.map(_open_store, [url] * 8)
    assert outcomes == ["ok"] * 8


def test_heads_keep_the_time_of_their_last_push_and_a_comment_is_claimed_once(store):
    from datetime import datetime, timedelta, timezone

    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    store.record_head("o/r", 1, "a", t0)
    store.record_head("o/r", 1, "b", t0 + timedelta(minutes=1))
    store.record_head("o/r", 1, "a", t0 + timedelta(minutes=2))  # pushed back: the later time
    store.record_head("o/r", 1, "b", t0)  # a redelivered older webhook changes nothing
    assert store.heads("o/r", 1) == [("b", t0 + timedelta(minutes=1)), ("a", t0 + timedelta(minutes=2))]
    comment_id = 12345678901234567890  # wider than any integer column
    assert store.claim_comment("o/r", comment_id, "created:x") is True
    assert store.claim_comment("o/r", comment_id, "created:x") is False
    assert store.claim_comment("o/r", comment_id, "edited:y") is True
    store.release_comment("o/r", comment_id, "created:x")
    assert store.claim_comment("o/r", comment_id, "created:x") is True


def test_githubs_64_bit_ids_are_stored_whole(store):
    """Check-run and comment ids are past 2^31 on github.com (a 32-bit column overflows on
    PostgreSQL): they round-trip exactly."""
    run_id = store.start_run("o/r", 1, "h" * 40, "pr")
    store.update_run(run_id, check_run_id=38_518_772_331, comment_id=2_498_120_456)
    run = store.run(run_id)
    assert (run["check_run_id"], run["comment_id"]) == (38_518_772_331, 2_498_120_456)


def test_without_a_postgresql_server_the_tests_start_their_own(tmp_path):
    """A fresh machine has no server on 5432: `postgres_url` then starts a private one from
    Debian's binaries (tests/private_postgres.py), so the PostgreSQL tests run there too; it is
    gone afterwards."""
    from tests.private_postgres import private_postgres, server_binaries

    binaries = server_binaries()
    assert binaries is not None, "scripts/system-deps.sh installs Debian's postgresql"
    with private_postgres(binaries) as url:
        assert ":5432/" not in url
        db = Store(url, prefix="private_")
        db.record_results("o/r", "h1", [Outcome(suite="probe", test="t::a", target="host", outcome="failed")])
        assert [r["outcome"] for r in db.results_for("o/r", "h1")] == ["failed"]
        db.drop_all()
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
