"""Mutes: the grammar of `/etriage mute`, who may mute (the commands' own permission check, over
HTTP to the GitHub double), the store's rows on SQLite and PostgreSQL, and which failures of a
run a repository's mutes cover (bot.mutes)."""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest

from bot import mutes, repo_config
from bot.command_grammar import Command, CommandError, parse
from bot.commands import CommandContext, handle_comment
from bot.history import History
from bot.store import Store
from tasks.records import Verdict
from triage_rules import Failure

BOT = "etriage[bot]"
REPO, PR = "pytorch/executorch", 7
CLUSTER = "c0123456789a"


@pytest.mark.parametrize("line, kind, key, seconds, reason", [
    ("/etriage mute test exir/tests/test_passes.py::T::test_a for 7d because flaky on the QNN runner",
     "test", "exir/tests/test_passes.py::T::test_a", 7 * 86400, "flaky on the QNN runner"),
    ('/etriage mute cluster c0123456789a for 2 weeks because "tracked in #123"', "cluster", CLUSTER,
     14 * 86400, "tracked in #123"),
    ("/etriage mute TEST `t::a` for 12h BECAUSE runner image broke", "test", "t::a", 12 * 3600, "runner image broke"),
    ("@etriage mute test t::a for 30 minutes because x", "test", "t::a", 1800, "x"),
    ("/etriage mute test t::a for 90d because the longest", "test", "t::a", 90 * 86400, "the longest"),
])
def test_mute_lines_that_read(line, kind, key, seconds, reason):
    [command] = parse(line, BOT)
    assert isinstance(command, Command), command
    assert (command.verb, command.mute_kind, command.mute_key, command.mute_seconds, command.reason) == \
        ("mute", kind, key, seconds, reason)


@pytest.mark.parametrize("line, message", [
    ("/etriage mute t::a for 7d because x", "say what to mute, `test <test id>` or `cluster <cluster id>`"),
    ("/etriage mute test t::a 7d because x", "say for how long and why"),
    ("/etriage mute test t::a for 7d", "say for how long and why"),
    ("/etriage mute test t::a for 7d because", "say why the mute is there"),
    ("/etriage mute test t::a for soon because x", "`soon` is not a duration"),
    ("/etriage mute test t::a for 91d because x", "`91d` is out of range: a mute lasts between 5 minutes and 90 days"),
    ("/etriage mute test t::a for 1m because x", "`1m` is out of range"),
    ("/etriage mute cluster @octocat for 7d because x", "`@octocat` is not a cluster id"),
    ("/etriage mute test t::a for 7d because " + "x" * 501, "the reason is longer than 500 characters"),
    ("/etriage unmute test", "unmute: missing argument"),
    ("/etriage unmute tests t::a", "`tests` is neither `test` nor `cluster`"),
])
def test_mute_lines_that_do_not_read_say_why(line, message):
    [error] = parse(line, BOT)
    assert isinstance(error, CommandError) and message in error.message, error


class World:
    def __init__(self, double, github, store, dispatcher):
        self.double, self.github, self.store, self.dispatcher = double, github, store, dispatcher
        double.add_pull(REPO, PR, "a" * 40, "b" * 40, author="outsider")
        for level in ("read", "triage", "write", "maintain", "admin"):
            double.set_permission(REPO, level, level)

    def comment(self, author: str, body: str):
        comment_id = self.double.add_user_comment(REPO, PR, author, body)
        ctx = CommandContext(github=self.github, store=self.store, enqueue=self.dispatcher,
                             repo_config=repo_config.load(None), bot_login=BOT)
        return handle_comment(ctx, repo=REPO, pr=PR, comment_id=comment_id, author=author, author_type="User",
                              body=body, previous_body=None, action="created")

    def replies(self) -> list[str]:
        return [c["body"] for c in self.double.comments_on(REPO, PR) if c["user"] == BOT]


@pytest.fixture
def world(github_double, github, store, dispatcher) -> World:
    return World(github_double, github, store, dispatcher)


@pytest.mark.parametrize("level, status", [("read", "refused"), ("triage", "refused"), ("write", "accepted"),
                                           ("maintain", "accepted"), ("admin", "accepted")])
def test_only_maintainers_mute(world, level, status):
    [outcome] = world.comment(level, "/etriage mute test t::a for 7d because flaky on the runner")
    assert outcome.status == status, outcome
    assert bool(mutes.active(world.store, REPO)) is (status == "accepted")
    if status == "refused":
        assert f"`mute` needs write access to {REPO} (you have {level})" in world.replies()[-1]


def test_a_mute_is_answered_with_its_end_and_how_to_lift_it(world):
    [outcome] = world.comment("write", "/etriage mute test t::a for 7d because flaky on the runner")
    [mute] = mutes.active(world.store, REPO)
    assert (mute.kind, mute.key, mute.reason, mute.muted_by) == ("test", "t::a", "flaky on the runner", "write")
    assert timedelta(days=7) - timedelta(minutes=1) < mute.until - datetime.now(timezone.utc) <= timedelta(days=7)
    assert mutes.when(mute.until) in outcome.reply and "`/etriage unmute test t::a` lifts it" in outcome.reply
    [outcome] = world.comment("write", "/etriage unmute test t::a")
    assert outcome.status == "accepted" and mutes.active(world.store, REPO) == []
    [outcome] = world.comment("write", "/etriage unmute test t::a")
    assert outcome.status == "refused" and "no mute of test `t::a` is in force" in outcome.detail


def test_a_cluster_must_be_known_to_be_muted(world):
    [outcome] = world.comment("write", f"/etriage mute cluster {CLUSTER} for 7d because x")
    assert outcome.status == "refused" and "no failure cluster" in outcome.detail
    clusters = History(world.store).t["clusters"]
    with world.store.engine.begin() as conn:
        conn.execute(clusters.insert().values(id=CLUSTER, text="boom", title="RuntimeError: boom"))
    [outcome] = world.comment("write", f"/etriage mute cluster {CLUSTER} for 7d because x")
    assert outcome.status == "accepted"


def test_a_reason_with_markdown_is_shown_as_text(world):
    [outcome] = world.comment("write", "/etriage mute test t::a for 7d because @octocat see ![x](http://e/x)")
    assert "@octocat" not in outcome.reply.replace("\\@octocat", "") and "![x]" not in outcome.reply


# ---- the store, on SQLite and PostgreSQL -------------------------------------------------------------------
@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path):
    if request.param == "sqlite":
        store = Store(f"sqlite:///{tmp_path / 'etriage.db'}")
    else:
        store = Store(request.getfixturevalue("postgres_url"), prefix=f"t{uuid.uuid4().hex[:10]}_")
    History(store)
    yield store
    store.drop_all()


def test_muting_again_changes_the_mute_in_force_and_an_expired_one_stays_history(db):
    soon = datetime.now(timezone.utc) + timedelta(hours=1)
    first = db.mute(REPO, "test", "t::a", until=soon, reason="one", by="a", source="comment")
    second = db.mute(REPO, "test", "t::a", until=soon + timedelta(days=1), reason="two", by="b", source="dashboard")
    assert first["id"] == second["id"] and len(db.mutes(REPO)) == 1
    [active] = mutes.active(db, REPO)
    assert (active.reason, active.muted_by, active.source) == ("two", "b", "dashboard")
    assert mutes.active(db, REPO, now=soon + timedelta(days=2)) == []  # expired: applies to nothing
    assert mutes.active(db, "other/repo") == []
    assert db.lift_mute(REPO, "test", "t::a", "c") == 1 and mutes.active(db, REPO) == []
    third = db.mute(REPO, "test", "t::a", until=soon, reason="three", by="a", source="comment")
    assert third["id"] != first["id"] and [m["reason"] for m in db.mutes(REPO)] == ["three", "two"]


def verdict(test: str, fingerprint: str, line: str = "RuntimeError: boom", verdict_: str = "new") -> Verdict:
    return Verdict(suite="s", test=test, target="host", base="passed", head="failed", verdict=verdict_,
                   failure=Failure(line=line, line_no=1, test=test, fingerprint=fingerprint))


def mute(kind: str, key: str) -> mutes.Mute:
    return mutes.Mute(1, REPO, kind, key, "known flaky", "alice", datetime(2030, 1, 2, 3, 4, tzinfo=timezone.utc))


def test_a_test_mute_covers_that_test_and_a_cluster_mute_its_failures():
    runs = [verdict("t::a", "fa"), verdict("t::b", "fb"), verdict("t::c", "fc")]
    asked = []
    covered = mutes.covered([mute("test", "t::a")], runs, lambda failures: asked.append(failures) or [])
    assert covered == {"t::a": "muted repo-wide (test t::a) by alice until 2030-01-02 03:04 UTC: known flaky"}
    assert asked == []  # no cluster muted: the clusters are not looked up
    covered = mutes.covered([mute("cluster", CLUSTER)], runs,
                            lambda failures: [CLUSTER if fp == "fb" else None for _, fp in failures])
    assert list(covered) == ["fb"] and "cluster c0123456789a" in covered["fb"]


def test_muted_failures_become_ignored_with_the_mute_said_and_do_not_count():
    from tasks.pipeline.compare import apply_ignores

    runs = [verdict("t::a", "fa"), verdict("t::b", "fb")]
    counts = apply_ignores(runs, mutes.covered([mute("test", "t::a")], runs, lambda f: [None] * len(f)))
    assert counts["new"] == 1 and counts["ignored"] == 1
    assert runs[0].verdict == "ignored" and runs[0].ignored_reason.startswith("muted repo-wide (test t::a)")


@pytest.mark.parametrize("text, seconds", [("5m", 300), ("30 min", 1800), ("12h", 43200), ("1 hour", 3600),
                                           ("7d", 604800), ("1 day", 86400), ("2w", 1209600), ("90 days", 7776000)])
def test_durations(text, seconds):
    assert mutes.parse_duration(text).total_seconds() == seconds
