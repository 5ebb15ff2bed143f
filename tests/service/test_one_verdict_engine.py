"""One verdict engine: a failing test of the bot's own run and a failure in a CI job's log are
judged, ignored and published by the same code (tasks.pipeline.compare), so `pre_existing`,
`environment` and `/etriage ignore` mean the same for both. The failures come from real CI logs
classified by the real engine; the service's functions run in this process with real clients
(the GitHub double over HTTP, Redis, SQLite, the PR's clone for the merge base)."""
from __future__ import annotations

import pytest

from bot import md
from tasks import service
from tasks.celery_app import WorkerOptions
from tasks.pipeline import compare
from tasks.records import BuildResult, Plan, Report, SuiteResult
from tasks.records import TestResult as Outcome
from tests.service.conftest import INSTALLATION, PR, REPO
from tests.service.github_double import ci_log
from triage_rules import classify_text

RUNTIME_LOG = "pytest_failure.txt"  # two runtime_error failures
ENVIRONMENT_LOG = "docker_manifest_unknown.txt"  # ci_infra, the runner's fault
LINT_LOG = "lint_lintrunner.txt"  # lint
PROBE_TEXT = ("problem: partitioner map routed wrongly\n"
              "ProbeFailure: [multi_method_lowering] two methods on XNNPACK + portable: partitioner map "
              "routed wrongly: method 'decode' was given NoDelegationPartitioner\n")


def failing(text: str, suite="probes", test="multi_method::per_method_partitioners") -> Outcome:
    return Outcome(suite=suite, test=test, target="host", outcome="failed",
                      message=text.strip().splitlines()[-1], text=text)


def pr_verdicts(head: Outcome, *, failed_at_base: bool):
    key = (head.suite, head.target, head.test)
    base = {key: Outcome(suite=head.suite, test=head.test, target=head.target,
                            outcome="failed" if failed_at_base else "passed")}
    heads = {key: head}
    return compare.decide(base, heads, compare.classify_failing(heads, classify_text), {})


def ci_verdicts(log: str, *, base_log: str | None = None):
    base = {f.fingerprint for f in classify_text(ci_log(base_log), job_name="job", failed=True)} if base_log else set()
    found = [({"name": "job", "id": 1}, f) for f in classify_text(ci_log(log), job_name="job", failed=True)]
    return compare.decide_ci(found, base)


@pytest.mark.parametrize("failed_at_base, expected", [(True, "pre_existing"), (False, "new")])
def test_a_failure_at_the_merge_base_too_is_pre_existing_wherever_it_was_found(failed_at_base, expected):
    text = ci_log(RUNTIME_LOG)
    [from_run] = pr_verdicts(failing(text, "selected", "distributed/test_c10d_spawn_gloo.py::t"),
                             failed_at_base=failed_at_base)
    from_ci = ci_verdicts(RUNTIME_LOG, base_log=RUNTIME_LOG if failed_at_base else None)
    assert from_run.verdict == expected and {v.verdict for v in from_ci} == {expected}
    assert from_run.category == "runtime_error" and {v.category for v in from_ci} == {"runtime_error"}


@pytest.mark.parametrize("failed_at_base", [True, False])
def test_an_environment_failure_is_environment_wherever_it_was_found(failed_at_base):
    text = ci_log(ENVIRONMENT_LOG)
    [from_run] = pr_verdicts(failing(text, "selected", "t::env"), failed_at_base=failed_at_base)
    [from_ci] = ci_verdicts(ENVIRONMENT_LOG, base_log=ENVIRONMENT_LOG if failed_at_base else None)
    assert from_run.verdict == from_ci.verdict == "environment"
    assert from_run.failure.environment and from_ci.failure.category == "ci_infra"
    assert from_ci.suite == "job" and from_ci.base == ("failed" if failed_at_base else "absent")


# ---- through the service: CI logs and the bot's own run on one pull request ------------------
@pytest.fixture
def ctx(web):
    context = service.WorkerContext.create(web.settings, WorkerOptions.from_env(web.env))
    yield context
    context.store.close()


def bot_report(web) -> Report:
    """What the pipeline returns for a PR whose probe fails at head and passed at the merge
    base (the pipeline itself is tested in tests/pipeline/test_triage.py)."""
    head = failing(PROBE_TEXT)
    verdicts = pr_verdicts(head, failed_at_base=False)
    plan = Plan(base=web.base, head=web.head, merge_base=web.base, changed_files=[], areas=["exir"],
                backends=["xnnpack"], suites=["probes"], targets=["host"], recipes=[])
    return Report(base=web.base, head=web.head, merge_base=web.base, plan=plan,
                  build=BuildResult(status="ok", kind="overlay", commit=web.head), results=verdicts,
                  suites=[SuiteResult(suite="probes", target="host", commit=web.head, status="ran", tests=[head])],
                  summary={k: n for k, n in compare.tally(verdicts).items() if k != "ignored"} | {"not_run": 0})


def headline(double) -> str:
    [comment] = [c for c in double.comments_on(REPO, PR)
                 if c["user"] == double.bot_login and "etriage:summary" in c["body"]]
    return comment["body"].splitlines()[1]


def comment_body(double) -> str:
    [comment] = [c for c in double.comments_on(REPO, PR)
                 if c["user"] == double.bot_login and "etriage:summary" in c["body"]]
    return comment["body"]


def test_ci_and_bot_failures_are_judged_and_ignored_the_same_way(web, ctx):
    double, store = web.double, ctx.store
    double.add_workflow_run(REPO, 101, web.base, [{"id": 11, "name": "unittest / linux", "conclusion": "failure",
                                                   "log": ci_log(RUNTIME_LOG)}])
    double.add_workflow_run(REPO, 102, web.head, [
        {"id": 21, "name": "unittest / linux", "conclusion": "failure", "log": ci_log(RUNTIME_LOG)},
        {"id": 22, "name": "docker", "conclusion": "failure", "log": ci_log(ENVIRONMENT_LOG)},
        {"id": 23, "name": "lint", "conclusion": "failure", "log": ci_log(LINT_LOG)}])
    service.triage_ci(ctx, REPO, web.base, INSTALLATION, run_id=101)  # the merge base's CI
    service.triage_ci(ctx, REPO, web.head, INSTALLATION, run_id=102)
    report = bot_report(web)
    service.record_report(ctx, REPO, web.head, report)
    service.publish(ctx, REPO, PR, INSTALLATION, service.report_payload(web.head, report))

    # (b) the CI logs' verdicts: the merge base's failures are pre-existing, the runner's are
    # the environment's, the rest new; the store says the same as the comment
    by_source = {}
    for row in store.failures_for(REPO, web.head):
        by_source.setdefault(row["source"], set()).add(row["verdict"])
    assert by_source == {"ci:unittest / linux": {"pre_existing"}, "ci:docker": {"environment"},
                         "ci:lint": {"new"}, "etriage:probes@host": {"new"}}
    body = comment_body(double)
    assert f"2 pre-existing, 1 environment, 1 new (compared with the merge base `{web.base[:12]}`)" in body
    assert headline(double) == "## etriage: ❌ 2 new failures caused by this change · 2 pre-existing · 1 environment"
    [run] = double.check_runs_for(REPO, web.head)
    assert run["conclusion"] == "failure"
    assert sorted(double.labels_on(REPO, PR)) == ["triage: lint", "triage: multi-method"]

    # (a) one comment ignores a CI failure and a bot-found one by fingerprint prefix (and a
    # pre-existing one, which stays what it is): both leave the count, the conclusion and the labels
    new = {row["source"]: row["fingerprint"] for row in store.failures_for(REPO, web.head) if row["verdict"] == "new"}
    [pre_existing, *_] = [r["fingerprint"] for r in store.failures_for(REPO, web.head) if r["verdict"] == "pre_existing"]
    text = "\n".join([f'/etriage ignore {new["ci:lint"][:10]} --reason "lint rule changed upstream"',
                      f'/etriage ignore {new["etriage:probes@host"][:10]} --reason "tracked in #1"',
                      f'/etriage ignore {pre_existing[:10]} --reason "old news"'])
    double.set_permission(REPO, "maintainer", "write")
    comment_id = double.add_user_comment(REPO, PR, "maintainer", text)
    outcomes = service.handle_comment(ctx, REPO, PR, comment_id, INSTALLATION, author="maintainer",
                                      author_type="User", body=text, previous_body=None, action="created")
    assert [o.status for o in outcomes] == ["accepted"] * 3, outcomes

    assert headline(double) == ("## etriage: ✅ No new failures caused by this change · 2 pre-existing "
                                "· 1 environment · 2 ignored")
    body = comment_body(double)
    assert "Ignored by a maintainer (not counted): *lint rule changed upstream*" in body  # the CI section
    # the bot's own section; the reason is text (bot.md): "#1" links no issue, "@x" pings nobody
    assert f"tracked in \\#{md.JOINER}1" in body.split("### CI logs")[0]
    assert "old news" not in body
    [run] = double.check_runs_for(REPO, web.head)  # the same check run, concluded again
    assert run["conclusion"] == "success" and run["output"]["title"].startswith("0 new failure(s)")
    assert double.labels_on(REPO, PR) == []
    assert not store.pending_reports()
