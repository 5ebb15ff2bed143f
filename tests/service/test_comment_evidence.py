"""The PR comment's evidence and commands through the service: every failure is numbered and
linked (a CI failure to its job's log at #step:S:L on GitHub, the bot's own to the web app's
artefact and probe script, served by the real app over HTTP), and each command of the comment
does what it says against the GitHub double (explain and ignore by number, rerun re-running the
head's failed GitHub Actions jobs). The service's functions run in this process with real
clients (the double over HTTP, Redis, SQLite); the pipeline's report is built from real
verdicts (tests/pipeline covers the pipeline)."""
from __future__ import annotations

import re
import urllib.request

import pytest

from bot.evidence import NUMBER
from tasks import service
from tasks.celery_app import WorkerOptions
from tasks.probes import standalone
from tests.service.conftest import INSTALLATION, PR, REPO
from tests.service.test_one_verdict_engine import bot_report
from etriage.demo import actions_log, log_text

CI_LOG = "pytest_failure.txt"


@pytest.fixture
def ctx(web):
    public = web.url.removesuffix("/webhook")
    context = service.WorkerContext.create(web.settings.model_copy(update={"public_url": public}),
                                           WorkerOptions.from_env(web.env))
    yield context
    context.store.close()


def comment(web, ctx, author: str, body: str):
    comment_id = web.double.add_user_comment(REPO, PR, author, body)
    return service.handle_comment(ctx, REPO, PR, comment_id, INSTALLATION, author=author, author_type="User",
                                  body=body, previous_body=None, action="created")


def reply(web) -> str:
    return [c["body"] for c in web.double.comments_on(REPO, PR)
            if c["user"] == web.double.bot_login and "etriage:summary" not in c["body"]][-1]


def comment_body(double) -> str:
    [summary] = [c["body"] for c in double.comments_on(REPO, PR)
                 if c["user"] == double.bot_login and "etriage:summary" in c["body"]]
    return summary


def get(url: str) -> tuple[int, dict, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, dict(answer.headers), answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read().decode()


@pytest.fixture
def published(web, ctx):
    """A PR whose probe fails at head (the bot's run) and whose CI job failed (a real Actions
    log with its steps), both published into the one comment."""
    web.double.set_permission(REPO, "maintainer", "maintain")
    log, steps = actions_log(log_text(CI_LOG))
    web.double.add_workflow_run(REPO, 102, web.head, [{"id": 21, "name": "unittest / linux", "conclusion": "failure",
                                                       "log": log, "steps": steps}])
    service.triage_ci(ctx, REPO, web.head, INSTALLATION, run_id=102)
    report = bot_report(web)
    service.record_report(ctx, REPO, web.head, report)
    service.publish(ctx, REPO, PR, INSTALLATION, service.report_payload(
        web.head, report, evidence=service.Links(ctx.settings.public_url, REPO, PR)))
    return comment_body(web.double)


def test_every_failure_is_numbered_and_linked_to_its_evidence(web, ctx, published):
    body = published
    assert NUMBER not in body
    numbers = re.findall(r"\*\*(\d+)\.\*\*", body)
    assert numbers == [str(n) for n in range(1, len(numbers) + 1)] and len(numbers) == 3  # 1 probe, 2 CI
    public = ctx.settings.public_url
    # the CI's: the job's page on GitHub at the failing line of its step (the tests ran in step 3)
    job = f"https://github.com/{REPO}/actions/runs/102/job/21"
    assert f"[job log, step 3 line 31]({job}#step:3:31)" in body and f"[job log, step 3 line 46]({job}#step:3:46)" in body
    # the bot's own: its artefact and its probe as a standalone script, both served by the web app
    [artefact] = re.findall(rf"\[evidence\]\(({re.escape(public)}/evidence/[^)]+)\)", body)
    [script] = re.findall(rf"\]\(({re.escape(public)}/evidence/[^)]+\.py)\)", body)
    status, headers, text = get(artefact)
    assert status == 200 and headers["X-Content-Type-Options"] == "nosniff"
    assert "partitioner map routed wrongly" in text and "multi_method::per_method_partitioners" in text
    status, headers, text = get(script)
    assert status == 200 and text == standalone.script("multi_method", "per_method_partitioners")
    assert 'filename="etriage_probe_multi_method_per_method_partitioners.py"' in headers["Content-Disposition"]
    assert "`python etriage_probe_multi_method_per_method_partitioners.py`" in body
    assert "python -m tasks.probes" not in body  # etriage's own module is no contributor's command
    assert get(script.replace("per_method_partitioners", "kv_cache_fp"))[0] == 404
    assert get(artefact.replace(web.head, "f" * 40))[0] == 404
    # the dashboard keeps the CI section without numbers (only the whole comment numbers them)
    from sqlalchemy import select

    history = service.History(ctx.store)
    with ctx.store.engine.connect() as conn:
        [kept] = conn.execute(select(history.t["triage_runs"].c.comment)).scalars().all()
    assert NUMBER not in kept and "- ❌ **new** · " in kept and "[job log, step 3 line 31]" in kept


def test_explain_and_ignore_take_the_comments_numbers(web, ctx, published):
    [explained] = comment(web, ctx, "someone", "/etriage explain 3")
    assert explained.status == "answered"
    text = reply(web)
    assert text.startswith("**3. ") and "#step:3:46" in text and "**What decided the category:**" in text
    [ignored] = comment(web, ctx, "maintainer", '/etriage ignore 1 --reason "known upstream"')
    assert ignored.status == "accepted"
    assert "Ignored 1 (`multi_method::per_method_partitioners`) on this pull request" in reply(web)
    body = comment_body(web.double)  # republished: the bot's failure is set aside, numbers kept
    assert body.splitlines()[1] == "## etriage: ❌ 2 new failures caused by this change · 1 ignored"  # the CI's remain
    assert "known upstream" in body and re.findall(r"\*\*(\d+)\.\*\*", body) == ["1", "2", "3"]


def test_rerun_reruns_the_failed_github_actions_jobs_and_queues_etriage(web, ctx, published):
    [outcome] = comment(web, ctx, "maintainer", "/etriage rerun")
    assert outcome.status == "accepted", outcome.detail
    [request] = web.double.requests_to("POST", r"/rerun-failed-jobs$")
    assert request.path == f"/repos/{REPO}/actions/runs/102/rerun-failed-jobs" and request.status == 201
    assert web.double.jobs[(REPO, 21)]["status"] == "queued"
    text = reply(web)
    assert text.startswith("Queued: GitHub re-runs the failed jobs of `Build` run 102; etriage runs its suites")
    assert web.redis.llen("triage") == 1  # the etriage run, published to the real broker
