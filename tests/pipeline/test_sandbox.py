"""Code from a change runs with nothing of the bot's environment: no token reaches it."""
import json
import sys

from tasks.pipeline.sandbox import run_logged, scrubbed_env

DUMP_ENV = "import json, os; print('ENV=' + json.dumps(dict(os.environ)))"


def test_a_pr_subprocess_sees_no_token_and_its_own_home(tmp_path, monkeypatch):
    monkeypatch.setenv("ETRIAGE_GITHUB_TOKEN", "ghs_secret_installation_token")
    monkeypatch.setenv("ETRIAGE_WEBHOOK_SECRET", "whsec_secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws_secret")
    monkeypatch.setenv("QNN_SDK_ROOT", "/opt/qnn")  # a tool location the worker passes on purpose
    env = scrubbed_env(tmp_path / "run", pass_through={"QNN_SDK_ROOT": "/opt/qnn", "GITHUB_TOKEN": "x"})
    cwd = tmp_path / "run"  # tmp_path itself is 0700 root's: the sandbox's user may not enter it
    done = run_logged([sys.executable, "-c", DUMP_ENV], cwd=cwd, env=env,
                      log_path=tmp_path / "run" / "env.log", timeout=60, readable=[cwd])
    assert done.returncode == 0
    log = done.log_path.read_text()
    dumped = next(line for line in log.splitlines() if line.startswith("ENV="))  # the log also echoes the command
    seen = json.loads(dumped.removeprefix("ENV="))
    assert "secret" not in log
    assert not {"ETRIAGE_GITHUB_TOKEN", "ETRIAGE_WEBHOOK_SECRET", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN"} & set(seen)
    assert seen["QNN_SDK_ROOT"] == "/opt/qnn"
    assert seen["HOME"] == seen["TMPDIR"] == "/tmp"  # the sandbox's own size-limited tmpfs


def test_without_a_sandbox_a_triage_runs_nothing_and_says_so(et_repo, tmp_path, patches):
    from tasks.pipeline.report import to_markdown
    from tasks.pipeline.run import TriageOptions, triage
    from tasks.pipeline.sandbox import Sandbox

    head = et_repo.branch("routing-no-sandbox", patches.pipeline("partitioner_routing"))
    report = triage(TriageOptions(repo=et_repo.path, base="main", head=head, data_dir=tmp_path,
                                  suites=["multi_method", "probes"], sandbox=Sandbox(bwrap="/nonexistent/bwrap")))
    assert {s.suite for s in report.suites} == {"multi_method", "probes"}
    assert all(s.status == "not_run" and s.reason.startswith("no sandbox: bubblewrap (bwrap) is not installed")
               for s in report.suites)
    assert report.build.status == "skipped" and report.results == []
    assert not (tmp_path / "runs").exists()  # not even an overlay was made
    markdown = to_markdown(report)
    assert "- multi_method, probes on host" in markdown and markdown.count("not run: no sandbox") == 1  # said once
    assert "never runs a change's code outside its sandbox" in markdown
