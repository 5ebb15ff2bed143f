"""Owners and noise through the whole service: signed webhooks over real HTTP -> the Flask app ->
Redis -> a real Celery worker process -> the GitHub double, on SQLite and on PostgreSQL.

- the PR comment cc's the owners the repository's own CODEOWNERS names (default branch), with
  the line that matched, and says "bundled table" when the repository has none;
- a failure cluster red on trunk N times opens one issue, updated (never doubled) on the next
  red commits and closed with a comment when its jobs pass on trunk again;
- `/etriage mute` (maintainers) shows a failure as muted, not counted, on the comment, keeps it
  from opening a trunk issue, and stops applying when it expires.
"""
from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from bot import mutes
from bot.history import TRUNK, History
from tests.service.conftest import PR, REPO
from tests.service.github_double import ci_log

pytestmark = pytest.mark.service

ENGINE_FIXTURES = Path(__file__).parents[1] / "engine" / "fixtures"
EXECUTORCH_CODEOWNERS = (ENGINE_FIXTURES / "codeowners" / "executorch.CODEOWNERS").read_text()
LINT_FILE = "backends/qualcomm/tests/utils.py"  # what the real lint failure below is about


def lint_log() -> str:
    """A real ExecuTorch lint failure (tests/engine/fixtures/executorch/README.md), headers removed."""
    raw = (ENGINE_FIXTURES / "executorch" / "drci_lint_qualcomm.log").read_text()
    return "\n".join(line for line in raw.splitlines() if not line.startswith("#|")) + "\n"


@pytest.fixture(params=["sqlite", "postgresql"])
def service_env(service_env, request):
    """The service's database: the conftest's SQLite file, or a PostgreSQL database of its own."""
    if request.param == "sqlite":
        yield service_env
        return
    server = request.getfixturevalue("postgres_url")
    name = f"etriage_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    yield dict(service_env, DATABASE_URL=server.rsplit("/", 1)[0] + "/" + name)
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def bot_comment(double) -> str:
    """The PR's one summary comment ("" before there is one; replies to commands are others)."""
    found = [c for c in double.comments_on(REPO, PR)
             if c["user"] == double.bot_login and "<!-- etriage:summary -->" in c["body"]]
    assert len(found) <= 1
    return found[0]["body"] if found else ""


def fail_ci(web, payloads, run_id: int, sha: str, jobs: list[dict]) -> None:
    web.double.add_workflow_run(REPO, run_id, sha, jobs)
    assert web.post("workflow_run", payloads.workflow_run(run_id, sha)).status_code == 202


def comment_command(web, payloads, author: str, body: str) -> int:
    comment_id = web.double.add_user_comment(REPO, PR, author, body)
    assert web.post("issue_comment", payloads.issue_comment(comment_id, author, body)).status_code == 202
    return comment_id


def test_the_comment_ccs_codeowners_and_a_mute_sets_the_failure_aside_until_it_expires(web, workers, payloads):
    double = web.double
    double.set_file(REPO, ".github/CODEOWNERS", EXECUTORCH_CODEOWNERS)
    workers()
    fail_ci(web, payloads, 301, web.head, [{"id": 71, "name": "lint / lintrunner", "conclusion": "failure",
                                            "log": lint_log()}])
    double.wait_for(lambda: "**cc**" in bot_comment(double), 90, "the cc")
    body = bot_comment(double)
    assert "## etriage: ❌ 1 new failure caused by this change" in body
    assert ("**cc** @cccclai @chunit-quic @haowhsu-quic @shewu-quic @winskuo-quic "
            "(from `.github/CODEOWNERS` on the default branch)") in body
    assert f"`{LINT_FILE}` (the file it failed on) matched line 12 `/backends/qualcomm`" in body

    # a reader may not mute; a maintainer mutes the test, and the comment says so without counting it
    double.set_permission(REPO, "maintainer", "write")
    comment_command(web, payloads, "reader", f"/etriage mute test {LINT_FILE} for 7d because lint rule in flux")
    double.wait_for(lambda: any("needs write access" in c["body"] for c in double.comments_on(REPO, PR)), 60, "refusal")
    comment_command(web, payloads, "maintainer", f"/etriage mute test {LINT_FILE} for 7d because lint rule in flux")
    double.wait_for(lambda: "1 ignored" in bot_comment(double), 60, "the muted comment")
    body = bot_comment(double)
    assert "## etriage: ✅ No new failures caused by this change · 1 ignored" in body
    assert f"muted repo-wide (test {LINT_FILE}) by maintainer until" in body and "lint rule in flux" in body
    assert "**cc**" not in body  # nobody is cc'd on a failure that is not counted
    assert double.labels_on(REPO, PR) == []
    store = web.store()
    try:
        [mute] = mutes.active(store, REPO)
        assert (mute.kind, mute.key, mute.muted_by, mute.source) == ("test", LINT_FILE, "maintainer", "comment")

        # the mute runs out: the next report counts the failure again
        table = store.t["mutes"]
        with store.engine.begin() as conn:
            conn.execute(table.update().values(until=mute.until.replace(year=2000)))
        fail_ci(web, payloads, 302, web.head, [{"id": 72, "name": "lint / lintrunner", "conclusion": "failure",
                                                "log": lint_log()}])
        double.wait_for(lambda: "❌ 1 new failure" in bot_comment(double), 60, "the failure to count again")
        assert "muted repo-wide" not in bot_comment(double) and "**cc**" in bot_comment(double)
    finally:
        store.close()


def test_a_repository_without_codeowners_is_ccd_from_the_bundled_table_and_says_so(web, workers, payloads):
    workers()
    fail_ci(web, payloads, 311, web.head, [{"id": 81, "name": "lint / lintrunner", "conclusion": "failure",
                                            "log": lint_log()}])
    double = web.double
    double.wait_for(lambda: "**cc**" in bot_comment(double), 90, "the cc")
    body = bot_comment(double)
    assert "(from etriage's bundled table: this repository has no CODEOWNERS)" in body
    assert f"`{LINT_FILE}` (the file it failed on) matched `/backends/qualcomm/`" in body
    for path in (".github/CODEOWNERS", "CODEOWNERS", "docs/CODEOWNERS"):  # looked for where GitHub looks
        assert double.requests_to("GET", f"/repos/{REPO}/contents/{path}$")


def trunk_jobs(sha_jobs: dict[str, str], base_ref: str, first_id: int) -> list[dict]:
    """{job name: "lint" | "runtime" | "success"} as the double's jobs of one trunk run."""
    logs = {"lint": lint_log(), "runtime": ci_log("python_runtimeerror.txt")}
    return [{"id": first_id + i, "name": name, "head_branch": base_ref,
             "conclusion": "success" if kind == "success" else "failure", "log": logs.get(kind, "")}
            for i, (name, kind) in enumerate(sha_jobs.items())]


def test_trunk_red_opens_one_issue_updates_it_and_closes_it_when_green(web, workers, payloads):
    double = web.double
    double.set_file(REPO, ".github/etriage.yml", "commands: {}\ntrunk_issues:\n  after: 2\n")
    double.set_file(REPO, ".github/CODEOWNERS", EXECUTORCH_CODEOWNERS)
    store = web.store()
    store.record_pull(REPO, PR, web.head, base_ref="master", base_sha=web.base)  # trunk: what PRs target
    history = History(store)
    workers()

    def trunk_run(run_id: int, sha: str, jobs: dict[str, str] | None):
        """A failed trunk run delivered, and waited for until its trunk issues are written: every
        run here has a failing cluster, whose row (counted or muted) is saved last."""
        before = max([r["updated_at"] for r in store.trunk_issues(REPO)], default=None)
        fail_ci(web, payloads, run_id, sha, trunk_jobs(jobs, "master", run_id * 10) if jobs else [])
        double.wait_for(lambda: max([r["updated_at"] for r in store.trunk_issues(REPO)], default=None) != before,
                        60, f"trunk run {run_id}")

    def issues():
        return double.issues_in(REPO)

    try:
        trunk_run(401, "1" * 40, {"lint / lintrunner": "lint", "unittest": "success"})
        [row] = double.wait_for(lambda: store.trunk_issues(REPO), 30, "the cluster's count")
        assert row["red_count"] == 1 and row["state"] == "none" and issues() == []  # 1 < after: 2

        trunk_run(402, "2" * 40, {"lint / lintrunner": "lint", "unittest": "success"})
        [issue] = double.wait_for(issues, 30, "the trunk issue")
        cluster = row["cluster_id"]
        assert issue["state"] == "open" and issue["labels"] == ["etriage: trunk red"]
        assert f"<!-- etriage:trunk-red {cluster} -->" in issue["body"]
        assert "red with this failure on 2 commit(s)" in issue["body"] and "`222222222222`" in issue["body"]
        assert "matched line 12 `/backends/qualcomm`" in issue["body"]  # its owners, from CODEOWNERS
        assert f"`/etriage mute cluster {cluster} for 7d because <reason>`" in issue["body"]
        assert issue["title"].startswith("Trunk red: lint: ")

        trunk_run(403, "3" * 40, {"lint / lintrunner": "lint", "unittest": "success"})
        double.wait_for(lambda: "on 3 commit(s)" in issues()[0]["body"], 30, "the issue updated")
        assert len(issues()) == 1 and len(double.requests_to("POST", f"/repos/{REPO}/issues$")) == 1
        edits = issues()[0]["edits"]
        trunk_run(403, "3" * 40, None)  # the same run delivered again: nothing changes
        assert len(issues()) == 1 and issues()[0]["edits"] == edits and "on 3 commit(s)" in issues()[0]["body"]

        # trunk green for the lint job (another job fails): the issue is closed, with a comment
        trunk_run(404, "4" * 40, {"lint / lintrunner": "success", "unittest": "runtime"})
        double.wait_for(lambda: issues()[0]["state"] == "closed", 30, "the issue closed")
        [said] = issues()[0]["comments"]
        assert "Trunk is green again" in said["body"] and "`444444444444`" in said["body"]
        double.wait_for(lambda: store.trunk_issue(REPO, cluster)["state"] == "closed", 30, "the store's record")

        # the runtime failure is muted: red on trunk twice more, it opens no issue
        [runtime] = [r for r in store.trunk_issues(REPO) if r["cluster_id"] != cluster]
        double.set_permission(REPO, "maintainer", "write")
        comment_command(web, payloads, "maintainer",
                        f"/etriage mute cluster {runtime['cluster_id']} for 2w because known flaky runner")
        double.wait_for(lambda: mutes.active(store, REPO), 60, "the mute")
        trunk_run(405, "5" * 40, {"lint / lintrunner": "success", "unittest": "runtime"})
        trunk_run(406, "6" * 40, {"lint / lintrunner": "success", "unittest": "runtime"})
        muted = store.trunk_issue(REPO, runtime["cluster_id"])
        assert len(issues()) == 1 and muted["red_count"] == 1 and muted["last_sha"] == "6" * 40

        # red again after the close: the same issue is reopened, counted from the close
        trunk_run(407, "7" * 40, {"lint / lintrunner": "lint", "unittest": "success"})
        trunk_run(408, "8" * 40, {"lint / lintrunner": "lint", "unittest": "success"})
        double.wait_for(lambda: issues()[0]["state"] == "open", 30, "the issue reopened")
        assert len(issues()) == 1 and "on 2 commit(s)" in issues()[0]["body"]
    finally:
        store.close()


@pytest.fixture
def ctx(web):
    from tasks import service
    from tasks.celery_app import WorkerOptions

    context = service.WorkerContext.create(web.settings, WorkerOptions.from_env(web.env))
    yield context
    context.store.close()


def test_a_muted_failure_of_the_bots_own_run_does_not_fail_the_check_run(web, ctx):
    """The bot's own run (a probe failing at head, passing at the merge base), published as the
    worker publishes it; `/etriage mute` through the worker's comment handler republishes it
    with the failure muted (check run: success), and once the mute expires it counts again."""
    from tasks import service
    from tests.service.conftest import INSTALLATION
    from tests.service.test_one_verdict_engine import bot_report

    double, store = web.double, ctx.store
    gh = ctx.github(INSTALLATION)
    report = bot_report(web)
    service.record_report(ctx, REPO, web.head, report)
    payload = service.report_payload(web.head, report, (), service.ignores(ctx, REPO, PR, report.results))
    service.publish(ctx, REPO, PR, INSTALLATION, service.with_owners(ctx, gh, REPO, payload, report.results))
    [run] = double.check_runs_for(REPO, web.head)
    assert run["conclusion"] == "failure"
    test_id = report.results[0].test

    double.set_permission(REPO, "maintainer", "write")
    text = f"/etriage mute test {test_id} for 1d because partitioner rework in #4627"
    comment_id = double.add_user_comment(REPO, PR, "maintainer", text)
    [outcome] = service.handle_comment(ctx, REPO, PR, comment_id, INSTALLATION, author="maintainer",
                                       author_type="User", body=text, previous_body=None, action="created")
    assert outcome.status == "accepted", outcome
    [run] = double.check_runs_for(REPO, web.head)
    assert run["conclusion"] == "success"
    body = bot_comment(double)
    assert "## etriage: ✅ No new failures caused by this change · 1 ignored" in body
    assert "#### Ignored by a maintainer (not counted)" in body  # shown, never hidden
    assert f"muted repo-wide (test {test_id}) by maintainer until" in body and "partitioner rework in" in body

    table = store.t["mutes"]
    with store.engine.begin() as conn:
        conn.execute(table.update().values(until=table.c.created_at))  # it ran out
    service.republish(ctx, REPO, PR, INSTALLATION)
    [run] = double.check_runs_for(REPO, web.head)
    assert run["conclusion"] == "failure" and "muted repo-wide" not in bot_comment(double)
