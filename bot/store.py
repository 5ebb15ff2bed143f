"""The database: SQLAlchemy Core over SQLite (embedded default) or PostgreSQL (DATABASE_URL).

Every write is keyed so a redelivered task repeats it harmlessly: results are unique per
(repo, head_sha, suite, target, test), failures per (repo, sha, source, fingerprint), runs per
(repo, pr, head_sha, kind), pending reports per (repo, pr, kind). `prefix` namespaces the table
names (tests run against a shared PostgreSQL and drop their own tables afterwards). The schema
is made and changed by Alembic migrations (bot/migrations), never by create_all.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import (JSON, BigInteger, Boolean, Column, DateTime, Float, Index, Integer, MetaData, String,
                        Table, Text, UniqueConstraint, create_engine, event, select, text)
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

from bot.coverage_tables import coverage_tables
from bot.history import history_tables


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _aware(moment: datetime) -> datetime:
    """SQLite gives naive datetimes back: they were written in UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _tables(metadata: MetaData, p: str) -> dict[str, Table]:
    def table(name, *columns):
        return Table(f"{p}{name}", metadata, *columns)

    return {
        "installations": table(
            "installations", Column("id", Integer, primary_key=True, autoincrement=False),
            Column("account", String(200)), Column("action", String(40)),
            Column("updated_at", DateTime(timezone=True))),
        "pull_requests": table(
            "pull_requests", Column("repo", String(200), primary_key=True),
            Column("pr", Integer, primary_key=True), Column("head_sha", String(64)),
            Column("base_ref", String(200)), Column("base_sha", String(64)),
            Column("installation_id", Integer), Column("state", String(20)),
            Column("updated_at", DateTime(timezone=True))),
        "runs": table(
            "runs", Column("id", Integer, primary_key=True), Column("repo", String(200)),
            Column("pr", Integer), Column("head_sha", String(64)), Column("kind", String(20)),
            Column("status", String(20)), Column("conclusion", String(20)),
            Column("check_run_id", BigInteger), Column("comment_id", BigInteger),  # GitHub ids: 64-bit (0006)
            Column("summary", Text), Column("report", JSON),
            Column("created_at", DateTime(timezone=True)),
            Column("updated_at", DateTime(timezone=True)),
            UniqueConstraint("repo", "pr", "head_sha", "kind")),
        "results": table(
            "results", Column("id", Integer, primary_key=True), Column("repo", String(200)),
            Column("head_sha", String(64)), Column("suite", String(200)),
            Column("target", String(100)), Column("test", String(500)),
            Column("outcome", String(20)), Column("duration", Float), Column("details", JSON),
            UniqueConstraint("repo", "head_sha", "suite", "target", "test")),
        "failures": table(
            "failures", Column("id", Integer, primary_key=True), Column("repo", String(200)),
            Column("sha", String(64)), Column("source", String(300)),
            Column("fingerprint", String(100)), Column("category", String(60)),
            Column("test", String(500)), Column("line", Text), Column("line_no", Integer),
            Column("environment", Boolean), Column("verdict", String(20)),
            Column("title", Text), Column("explanation", Text), Column("suggestion", Text),
            Column("created_at", DateTime(timezone=True)),
            UniqueConstraint("repo", "sha", "source", "fingerprint")),
        "pending_reports": table(
            "pending_reports", Column("repo", String(200), primary_key=True),
            Column("pr", Integer, primary_key=True), Column("kind", String(20), primary_key=True),
            Column("head_sha", String(64)), Column("installation_id", Integer),
            Column("payload", JSON), Column("attempts", Integer),
            Column("last_error", Text), Column("updated_at", DateTime(timezone=True))),
        "device_approvals": table(
            "device_approvals", Column("repo", String(200), primary_key=True),
            Column("pr", Integer, primary_key=True), Column("head_sha", String(64), primary_key=True),
            Column("approved_by", String(200)), Column("at", DateTime(timezone=True))),
        "pull_heads": table(  # when each head became the PR's head, GitHub's time (migration 0003)
            "pull_heads", Column("repo", String(200), primary_key=True),
            Column("pr", Integer, primary_key=True), Column("head_sha", String(64), primary_key=True),
            Column("pushed_at", DateTime(timezone=True))),
        "comment_runs": table(  # a comment's commands ran once per id and edit (migration 0003)
            "comment_runs", Column("repo", String(200), primary_key=True),
            Column("comment_id", String(40), primary_key=True), Column("stamp", String(120), primary_key=True),
            Column("at", DateTime(timezone=True))),
        "ignored_failures": table(
            "ignored_failures", Column("repo", String(200), primary_key=True),
            Column("pr", Integer, primary_key=True), Column("key", String(300), primary_key=True),
            Column("reason", Text), Column("ignored_by", String(200)),
            Column("at", DateTime(timezone=True))),
        "command_audit": table(
            "command_audit", Column("id", Integer, primary_key=True), Column("repo", String(200)),
            Column("pr", Integer), Column("actor", String(200)), Column("command", Text),
            Column("outcome", Text), Column("at", DateTime(timezone=True))),
        # a test or a failure cluster set aside repo-wide until `until` (migration 0005, bot/mutes.py)
        "mutes": table(
            "mutes", Column("id", Integer, primary_key=True), Column("repo", String(200), nullable=False),
            Column("kind", String(10), nullable=False), Column("key", String(500), nullable=False),
            Column("reason", Text, nullable=False), Column("muted_by", String(200)),
            Column("source", String(20)), Column("created_at", DateTime(timezone=True)),
            Column("until", DateTime(timezone=True), nullable=False),
            Column("lifted_at", DateTime(timezone=True)), Column("lifted_by", String(200)),
            Index(f"{p}ix_mutes_repo_key", "repo", "kind", "key")),
        # one GitHub issue per failure cluster red on trunk (migration 0005, bot/trunk_issues.py)
        "trunk_issues": table(
            "trunk_issues", Column("repo", String(200), primary_key=True),
            Column("cluster_id", String(16), primary_key=True), Column("number", Integer),
            Column("state", String(10)), Column("red_count", Integer),
            Column("since", DateTime(timezone=True)), Column("last_sha", String(64)),
            Column("last_red_at", DateTime(timezone=True)), Column("jobs", JSON),
            Column("opened_at", DateTime(timezone=True)), Column("closed_at", DateTime(timezone=True)),
            Column("updated_at", DateTime(timezone=True))),
    }


# ---- records to rows: one mapper per record type, the only place that knows the columns ----
def failure_row(repo: str, sha: str, source: str, failure, verdict: str | None = None) -> dict:
    """A triage_rules Failure (found at `sha` by `source`) with its verdict, as a `failures` row."""
    return dict(repo=repo, sha=sha, source=source, fingerprint=failure.fingerprint,
                category=failure.category, test=failure.test, line=failure.line,
                line_no=failure.line_no, environment=bool(failure.environment), verdict=verdict,
                title=failure.title, explanation=failure.explanation,
                suggestion=failure.suggestion, created_at=_now())


def result_row(repo: str, head_sha: str, result) -> dict:
    """A tasks.records.TestResult as a `results` row. Read by attribute: the store sits below
    tasks/ and never imports it."""
    return dict(repo=repo, head_sha=head_sha, suite=result.suite, target=result.target,
                test=result.test, outcome=result.outcome, duration=result.seconds,
                details={"message": result.message[:2000]})


MIGRATIONS = Path(__file__).resolve().parent / "migrations"


_MIGRATED: set[tuple[str, str]] = set()  # (database, prefix) this process brought to head
_MIGRATING = threading.Lock()


def migrate(engine: Engine, prefix: str = "", revision: str = "head") -> None:
    """Run the schema migrations up to `revision` (Alembic, bot/migrations/versions/). The
    version is kept in `<prefix>alembic_version`; `_tables` below must match the newest
    migration (tests/service/test_store.py compares them). Processes starting together take
    turns: an advisory lock on PostgreSQL, a lock file beside an SQLite database."""
    key = (engine.url.render_as_string(hide_password=True), prefix)
    with _MIGRATING:
        if key in _MIGRATED and revision == "head":
            return
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        with _between_processes(engine, prefix), engine.begin() as connection:
            if engine.dialect.name == "postgresql":  # held until this transaction ends
                connection.execute(text("SELECT pg_advisory_xact_lock(hashtext(:key))"),
                                   {"key": f"etriage-migrate:{prefix}"})
            config.attributes.update(connection=connection, prefix=prefix)
            command.upgrade(config, revision)
        _MIGRATED.add(key)


@contextlib.contextmanager
def _between_processes(engine: Engine, prefix: str):
    database = engine.url.database if engine.dialect.name == "sqlite" else None
    if not database or database == ":memory:":
        yield
        return
    with open(f"{database}.{prefix}migrate.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def default_database_url(data_dir) -> str:
    return f"sqlite:///{Path(data_dir).expanduser() / 'etriage.db'}"


def _engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30})

        @event.listens_for(engine, "connect")
        def _wal(dbapi_connection, _record):  # web and worker processes share the file
            dbapi_connection.execute("PRAGMA journal_mode=WAL")
            dbapi_connection.execute("PRAGMA busy_timeout=30000")
        return engine
    return create_engine(url, pool_pre_ping=True)


class Store:
    def __init__(self, url: str, *, prefix: str = ""):
        self.engine = _engine(url)
        self.prefix = prefix
        self.metadata = MetaData()
        self.t = _tables(self.metadata, prefix)
        history_tables(self.metadata, prefix)  # one schema: drop_all and the drift check see them too
        self.t.update(coverage_tables(self.metadata, prefix))
        self._create_tables()

    def _create_tables(self, attempts: int = 3) -> None:
        """Bring the schema to the newest migration (bot/migrations). Web and worker processes
        starting together can race: "already exists" means another process won, so look again."""
        for attempt in range(attempts):
            try:
                migrate(self.engine, self.prefix)
                return
            except (OperationalError, ProgrammingError, IntegrityError) as error:
                if "already exists" not in str(error) and "duplicate key" not in str(error) \
                        or attempt == attempts - 1:
                    raise

    @classmethod
    def from_settings(cls, settings) -> "Store":
        return cls(settings.database_url or default_database_url(settings.data_dir))

    def drop_all(self) -> None:
        self.metadata.drop_all(self.engine)
        with self.engine.begin() as conn:
            conn.execute(text(f'DROP TABLE IF EXISTS "{self.prefix}alembic_version"'))
        _MIGRATED.discard((self.engine.url.render_as_string(hide_password=True), self.prefix))
        self.engine.dispose()

    def close(self) -> None:
        self.engine.dispose()

    def _upsert(self, conn, table: Table, values: dict, keys: tuple[str, ...],
                update: tuple[str, ...] | None = None):
        dialect = self.engine.dialect.name
        if dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert
        stmt = insert(table).values(**values)
        columns = [c for c in (update if update is not None else values) if c not in keys]
        if columns:
            stmt = stmt.on_conflict_do_update(index_elements=list(keys),
                                              set_={c: stmt.excluded[c] for c in columns})
        else:
            stmt = stmt.on_conflict_do_nothing(index_elements=list(keys))
        return conn.execute(stmt)

    # ---- installations and pull requests -----------------------------------------------------
    def record_installation(self, installation_id: int, account: str, action: str) -> None:
        with self.engine.begin() as conn:
            self._upsert(conn, self.t["installations"],
                         dict(id=installation_id, account=account, action=action,
                              updated_at=_now()), ("id",))

    def installation(self, installation_id: int) -> dict | None:
        t = self.t["installations"]
        with self.engine.connect() as conn:
            row = conn.execute(select(t).where(t.c.id == installation_id)).mappings().first()
        return dict(row) if row else None

    def record_pull(self, repo: str, pr: int, head_sha: str, *, base_ref: str | None = None,
                    base_sha: str | None = None, installation_id: int | None = None,
                    state: str = "open") -> None:
        values = dict(repo=repo, pr=pr, head_sha=head_sha, state=state, updated_at=_now())
        for key, value in (("base_ref", base_ref), ("base_sha", base_sha),
                           ("installation_id", installation_id)):
            if value is not None:
                values[key] = value
        with self.engine.begin() as conn:
            self._upsert(conn, self.t["pull_requests"], values, ("repo", "pr"))

    def close_pull(self, repo: str, pr: int) -> None:
        t = self.t["pull_requests"]
        with self.engine.begin() as conn:
            conn.execute(t.update().where(t.c.repo == repo, t.c.pr == pr)
                         .values(state="closed", updated_at=_now()))

    def pull_state(self, repo: str, pr: int) -> dict | None:
        t = self.t["pull_requests"]
        with self.engine.connect() as conn:
            row = conn.execute(select(t).where(t.c.repo == repo, t.c.pr == pr)).mappings().first()
        return dict(row) if row else None

    def pulls_with_head(self, repo: str, head_sha: str) -> list[int]:
        t = self.t["pull_requests"]
        with self.engine.connect() as conn:
            return list(conn.execute(select(t.c.pr).where(
                t.c.repo == repo, t.c.head_sha == head_sha, t.c.state == "open")).scalars())

    def base_refs(self, repo: str) -> set[str]:
        """The branches this repository's pull requests target (its trunk, and release branches)."""
        t = self.t["pull_requests"]
        with self.engine.connect() as conn:
            return {ref for ref in conn.execute(select(t.c.base_ref).where(
                t.c.repo == repo, t.c.base_ref.is_not(None)).distinct()).scalars() if ref}

    def record_head(self, repo: str, pr: int, head_sha: str, pushed_at: datetime) -> None:
        """`head_sha` became the PR's head at `pushed_at` (GitHub's clock). A head pushed again
        later (A, B, then A back) keeps the later time: an approval must postdate its last push."""
        t = self.t["pull_heads"]
        with self.engine.begin() as conn:
            known = conn.execute(select(t.c.pushed_at).where(
                t.c.repo == repo, t.c.pr == pr, t.c.head_sha == head_sha)).scalar()
            if known is None or _aware(known) < pushed_at:
                self._upsert(conn, t, dict(repo=repo, pr=pr, head_sha=head_sha, pushed_at=pushed_at),
                             ("repo", "pr", "head_sha"))

    def heads(self, repo: str, pr: int) -> list[tuple[str, datetime]]:
        """(head sha, when it became the head), oldest first."""
        t = self.t["pull_heads"]
        with self.engine.connect() as conn:
            rows = conn.execute(select(t.c.head_sha, t.c.pushed_at).where(
                t.c.repo == repo, t.c.pr == pr).order_by(t.c.pushed_at)).all()
        return [(sha, _aware(at)) for sha, at in rows]

    def claim_comment(self, repo: str, comment_id: int, stamp: str) -> bool:
        """True the first time this comment id and edit (`stamp`) is claimed, False ever after."""
        try:  # the primary key decides, in one statement, between concurrent workers too
            with self.engine.begin() as conn:
                conn.execute(self.t["comment_runs"].insert().values(
                    repo=repo, comment_id=str(comment_id), stamp=stamp[:120], at=_now()))
            return True
        except IntegrityError:
            return False

    def release_comment(self, repo: str, comment_id: int, stamp: str) -> None:
        """Undo `claim_comment`: its commands did not get to run (the task is retried)."""
        t = self.t["comment_runs"]
        with self.engine.begin() as conn:
            conn.execute(t.delete().where(t.c.repo == repo, t.c.comment_id == str(comment_id),
                                          t.c.stamp == stamp[:120]))

    # ---- runs, results, failures ---------------------------------------------------------------
    def start_run(self, repo: str, pr: int, head_sha: str, kind: str) -> int:
        """The run row for (repo, pr, head_sha, kind), created once and reused by redeliveries."""
        t = self.t["runs"]
        with self.engine.begin() as conn:
            self._upsert(conn, t, dict(repo=repo, pr=pr, head_sha=head_sha, kind=kind,
                                       status="in_progress", created_at=_now(),
                                       updated_at=_now()),
                         ("repo", "pr", "head_sha", "kind"), update=("status", "updated_at"))
            return conn.execute(select(t.c.id).where(
                t.c.repo == repo, t.c.pr == pr, t.c.head_sha == head_sha, t.c.kind == kind)
            ).scalar_one()

    def update_run(self, run_id: int, **values) -> None:
        t = self.t["runs"]
        with self.engine.begin() as conn:
            conn.execute(t.update().where(t.c.id == run_id).values(updated_at=_now(), **values))

    def run(self, run_id: int) -> dict | None:
        t = self.t["runs"]
        with self.engine.connect() as conn:
            row = conn.execute(select(t).where(t.c.id == run_id)).mappings().first()
        return dict(row) if row else None

    def runs_for(self, repo: str, pr: int) -> list[dict]:
        t = self.t["runs"]
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(
                select(t).where(t.c.repo == repo, t.c.pr == pr).order_by(t.c.id)).mappings()]

    def expire_runs(self, older_than: timedelta) -> int:
        """Runs stuck in progress (their worker died for good) become `expired`."""
        t = self.t["runs"]
        with self.engine.begin() as conn:
            return conn.execute(t.update().where(
                t.c.status == "in_progress", t.c.updated_at < _now() - older_than
            ).values(status="expired", updated_at=_now())).rowcount

    def record_results(self, repo: str, head_sha: str, results) -> None:
        """results: tasks.records.TestResult records; last write wins per key."""
        with self.engine.begin() as conn:
            for result in results:
                self._upsert(conn, self.t["results"], result_row(repo, head_sha, result),
                             ("repo", "head_sha", "suite", "target", "test"))

    def results_for(self, repo: str, head_sha: str) -> list[dict]:
        t = self.t["results"]
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(select(t).where(
                t.c.repo == repo, t.c.head_sha == head_sha).order_by(t.c.id)).mappings()]

    def record_failures(self, repo: str, sha: str, source: str, failures, verdicts=None) -> None:
        """failures: triage_rules Failure records; verdicts: fingerprint -> verdict."""
        verdicts = verdicts or {}
        with self.engine.begin() as conn:
            for failure in failures:
                self._upsert(conn, self.t["failures"],
                             failure_row(repo, sha, source, failure, verdicts.get(failure.fingerprint)),
                             ("repo", "sha", "source", "fingerprint"),
                             update=("category", "line", "line_no", "environment", "verdict", "title",
                                     "explanation", "suggestion"))

    def failure_fingerprints(self, repo: str, sha: str) -> set[str]:
        t = self.t["failures"]
        with self.engine.connect() as conn:
            return set(conn.execute(select(t.c.fingerprint).where(
                t.c.repo == repo, t.c.sha == sha)).scalars())

    def failures_for(self, repo: str, sha: str) -> list[dict]:
        t = self.t["failures"]
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(select(t).where(
                t.c.repo == repo, t.c.sha == sha).order_by(t.c.id)).mappings()]

    def find_failure(self, repo: str, pr: int, ref: str) -> dict | None:
        """A failure at the PR's current head by its number in the summary (1-based), its test
        id or a fingerprint prefix (bot.commands' `explain` and `ignore`)."""
        pull = self.pull_state(repo, pr)
        if pull is None:
            return None
        failures = self.failures_for(repo, pull["head_sha"])
        if ref.isdigit() and 1 <= int(ref) <= len(failures):
            return failures[int(ref) - 1]
        for failure in failures:
            if failure["test"] == ref or (len(ref) >= 6 and failure["fingerprint"].startswith(ref)):
                return failure
        return None

    # ---- reports GitHub did not take yet -------------------------------------------------------
    def save_pending_report(self, repo: str, pr: int, kind: str, head_sha: str,
                            installation_id: int | None, payload: dict) -> None:
        """Keep a report until GitHub took it. A report of the same head keeps its count of
        failed tries; a newer head's report starts again at 0."""
        t = self.t["pending_reports"]
        with self.engine.begin() as conn:
            previous = conn.execute(select(t.c.head_sha, t.c.attempts, t.c.last_error).where(
                t.c.repo == repo, t.c.pr == pr, t.c.kind == kind)).first()
            same = previous is not None and previous.head_sha == head_sha
            self._upsert(conn, t, dict(
                repo=repo, pr=pr, kind=kind, head_sha=head_sha, installation_id=installation_id,
                payload=json.loads(json.dumps(payload)), attempts=previous.attempts if same else 0,
                last_error=previous.last_error if same else "not yet published", updated_at=_now()),
                ("repo", "pr", "kind"))

    def pending_report_failed(self, repo: str, pr: int, kind: str, head_sha: str, error: str) -> None:
        """One more try GitHub refused: counted once, with its error."""
        t = self.t["pending_reports"]
        with self.engine.begin() as conn:
            conn.execute(t.update().where(t.c.repo == repo, t.c.pr == pr, t.c.kind == kind,
                                          t.c.head_sha == head_sha)
                         .values(attempts=t.c.attempts + 1, last_error=error[:2000], updated_at=_now()))

    def pending_reports(self) -> list[dict]:
        t = self.t["pending_reports"]
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(select(t).order_by(t.c.updated_at)).mappings()]

    def clear_pending_report(self, repo: str, pr: int, kind: str, head_sha: str) -> None:
        t = self.t["pending_reports"]
        with self.engine.begin() as conn:
            conn.execute(t.delete().where(t.c.repo == repo, t.c.pr == pr, t.c.kind == kind,
                                          t.c.head_sha == head_sha))

    # ---- slash-command state (bot.commands) ---------------------------------------------------
    def approve_for_devices(self, repo: str, pr: int, head_sha: str, by: str) -> None:
        with self.engine.begin() as conn:
            self._upsert(conn, self.t["device_approvals"], dict(
                repo=repo, pr=pr, head_sha=head_sha, approved_by=by, at=_now()),
                ("repo", "pr", "head_sha"))

    def is_approved_for_devices(self, repo: str, pr: int, head_sha: str) -> bool:
        t = self.t["device_approvals"]
        with self.engine.connect() as conn:
            return conn.execute(select(t.c.pr).where(
                t.c.repo == repo, t.c.pr == pr, t.c.head_sha == head_sha)).first() is not None

    def ignore_failure(self, repo: str, pr: int, key: str, reason: str, by: str) -> None:
        with self.engine.begin() as conn:
            self._upsert(conn, self.t["ignored_failures"], dict(
                repo=repo, pr=pr, key=key, reason=reason, ignored_by=by, at=_now()),
                ("repo", "pr", "key"))

    def ignored_failures(self, repo: str, pr: int) -> dict[str, str]:
        t = self.t["ignored_failures"]
        with self.engine.connect() as conn:
            return {row.key: row.reason for row in conn.execute(
                select(t.c.key, t.c.reason).where(t.c.repo == repo, t.c.pr == pr))}

    def audit(self, repo: str, pr: int, actor: str, command: str, outcome: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(self.t["command_audit"].insert().values(
                repo=repo, pr=pr, actor=actor, command=command, outcome=outcome, at=_now()))

    def audit_log(self, repo: str, pr: int) -> list[dict]:
        t = self.t["command_audit"]
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(select(t).where(
                t.c.repo == repo, t.c.pr == pr).order_by(t.c.id)).mappings()]

    # ---- the coverage map (bot/coverage_tables.py) ------------------------------------------
    def record_coverage(self, rows: list[dict]) -> None:
        """Upsert coverage_lines rows: {source_path, source_blob, test, lines, test_blob, commit}."""
        if not rows:
            return
        table = self.t["coverage_lines"]
        dialect = self.engine.dialect.name
        if dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert
        stmt = insert(table)
        stmt = stmt.on_conflict_do_update(
            index_elements=["source_path", "source_blob", "test"],
            set_={c: stmt.excluded[c] for c in ("lines", "test_blob", "commit", "at")})
        now = _now()
        with self.engine.begin() as conn:
            for start in range(0, len(rows), 2000):
                conn.execute(stmt, [{**row, "at": now} for row in rows[start:start + 2000]])

    def coverage_of(self, source_path: str, source_blob: str) -> dict[str, str]:
        """test -> its lines ("3-7,12") of this version of the file."""
        t = self.t["coverage_lines"]
        with self.engine.connect() as conn:
            rows = conn.execute(select(t.c.test, t.c.lines).where(
                t.c.source_path == source_path, t.c.source_blob == source_blob)).all()
        return {test: lines for test, lines in rows}

    def record_coverage_file(self, commit: str, test_path: str, **values) -> None:
        with self.engine.begin() as conn:
            self._upsert(conn, self.t["coverage_files"],
                         dict(commit=commit, test_path=test_path, at=_now(), **values), ("commit", "test_path"))

    def coverage_files(self, commit: str) -> dict[str, dict]:
        t = self.t["coverage_files"]
        with self.engine.connect() as conn:
            rows = conn.execute(select(t).where(t.c.commit == commit)).mappings().all()
        return {row["test_path"]: dict(row) for row in rows}

    def measured_file(self, test_path: str, test_blob: str) -> list[dict]:
        """Every commit's done record of this version of a test file (newest first): what a
        carry-over compares its covered sources' blobs with."""
        t = self.t["coverage_files"]
        with self.engine.connect() as conn:
            rows = conn.execute(select(t).where(t.c.test_path == test_path, t.c.test_blob == test_blob,
                                                t.c.status.in_(("done", "carried"))).order_by(t.c.at.desc())
                                ).mappings().all()
        return [dict(row) for row in rows]

    def coverage_size(self) -> dict[str, int]:
        """Rows and characters of line ranges in the map (what it costs to keep)."""
        from sqlalchemy import func

        t = self.t["coverage_lines"]
        with self.engine.connect() as conn:
            rows, chars = conn.execute(select(func.count(), func.coalesce(func.sum(func.length(t.c.lines)), 0))
                                       .select_from(t)).one()
            tests = conn.execute(select(func.count(func.distinct(t.c.test)))).scalar()
        return {"rows": int(rows), "line_chars": int(chars), "tests": int(tests or 0)}

    # ---- mutes and trunk issues (bot/mutes.py, bot/trunk_issues.py; migration 0005) ---------
    def mute(self, repo: str, kind: str, key: str, *, until: datetime, reason: str, by: str,
             source: str) -> dict:
        """Mute `key` (a test id or a cluster id) until `until`. A mute of the same key still in
        force is changed (new time, reason and author), not doubled; an expired one stays as history."""
        t = self.t["mutes"]
        now = _now()
        values = dict(reason=reason, muted_by=by, source=source, until=until, created_at=now)
        with self.engine.begin() as conn:
            current = conn.execute(select(t.c.id).where(
                t.c.repo == repo, t.c.kind == kind, t.c.key == key, t.c.lifted_at.is_(None),
                t.c.until > now).order_by(t.c.id.desc()).limit(1)).scalar()
            if current is None:
                current = conn.execute(t.insert().values(repo=repo, kind=kind, key=key, **values)
                                       .returning(t.c.id)).scalar_one()
            else:
                conn.execute(t.update().where(t.c.id == current).values(**values))
            return _aware_row(conn.execute(select(t).where(t.c.id == current)).mappings().one())

    def lift_mute(self, repo: str, kind: str, key: str, by: str) -> int:
        """End the mutes of `key` still in force now; how many were."""
        t = self.t["mutes"]
        now = _now()
        with self.engine.begin() as conn:
            return conn.execute(t.update().where(
                t.c.repo == repo, t.c.kind == kind, t.c.key == key, t.c.lifted_at.is_(None),
                t.c.until > now).values(lifted_at=now, lifted_by=by)).rowcount

    def mutes(self, repo: str | None = None, *, active_at: datetime | None = None) -> list[dict]:
        """Mutes, newest first: of one repository or all; with `active_at`, only those in force then."""
        t = self.t["mutes"]
        query = select(t).order_by(t.c.id.desc())
        if repo is not None:
            query = query.where(t.c.repo == repo)
        if active_at is not None:
            query = query.where(t.c.until > active_at, t.c.created_at <= active_at,
                                (t.c.lifted_at.is_(None)) | (t.c.lifted_at > active_at))
        with self.engine.connect() as conn:
            return [_aware_row(row) for row in conn.execute(query).mappings()]

    def trunk_issue(self, repo: str, cluster_id: str) -> dict | None:
        t = self.t["trunk_issues"]
        with self.engine.connect() as conn:
            row = conn.execute(select(t).where(t.c.repo == repo, t.c.cluster_id == cluster_id)).mappings().first()
        return _aware_row(row) if row else None

    def save_trunk_issue(self, repo: str, cluster_id: str, **values) -> None:
        with self.engine.begin() as conn:
            self._upsert(conn, self.t["trunk_issues"],
                         dict(repo=repo, cluster_id=cluster_id, updated_at=_now(), **values),
                         ("repo", "cluster_id"))

    def trunk_issues(self, repo: str, state: str | None = None) -> list[dict]:
        t = self.t["trunk_issues"]
        query = select(t).where(t.c.repo == repo).order_by(t.c.cluster_id)
        if state is not None:
            query = query.where(t.c.state == state)
        with self.engine.connect() as conn:
            return [_aware_row(row) for row in conn.execute(query).mappings()]


def _aware_row(row) -> dict:
    """A row with its datetimes in UTC (SQLite gives them back naive)."""
    return {k: _aware(v) if isinstance(v, datetime) else v for k, v in dict(row).items()}
