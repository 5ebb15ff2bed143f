"""The README's serve + replay walk, run as written: the commands are read out of README.md's
section (so the test fails when the README drifts), run as real processes, and the comment is
read back from the GitHub double over HTTP. Also the seed itself: what it puts into the double,
and that stale payloads or a bad seed are refused with the file named."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from etriage.dev import seed_double
from etriage.dev.github_double import GitHubDouble
from tests.service.conftest import REPO_ROOT
from triage_rules.model import cache_dir as model_cache_dir

SECTION = "## Serve it and replay GitHub by hand"
SEED = REPO_ROOT / "etriage" / "dev" / "seed"


def readme_commands(readme: str) -> list[str]:
    """The shell commands of the section's first ```sh block: comments dropped, `\\` joined."""
    start = readme.index(SECTION)
    block = re.search(r"```sh\n(.*?)```", readme[start:], re.S)
    assert block, f"no ```sh block under {SECTION!r}"
    text = block.group(1).replace("\\\n", " ")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_the_readme_section_is_found_and_shaped_as_the_walk_expects():
    commands = readme_commands((REPO_ROOT / "README.md").read_text())
    assert commands[0].startswith("etriage serve ") and "--seed" in commands[0]
    assert all(c.startswith("etriage replay ") for c in commands[1:-1]) and len(commands) >= 3
    assert commands[-1].startswith("curl ")
    with pytest.raises(ValueError):
        readme_commands("# no such section\n")


@pytest.mark.service
def test_the_readmes_serve_and_replay_end_in_a_posted_comment(tmp_path):
    commands = readme_commands((REPO_ROOT / "README.md").read_text())
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path),
           "ETRIAGE_MODEL_CACHE": str(model_cache_dir()),  # the engine's model: trained once per run
           "ETRIAGE_GITHUB_WRITE_INTERVAL": "0"}
    # The one change to the README's commands: any free port, not 8000 (tests run side by side);
    # replay finds the URL in ~/.etriage either way.
    serve = subprocess.Popen(["bash", "-c", f"exec {commands[0]} --port 0 --concurrency 2"], cwd=REPO_ROOT,
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
    try:
        banner = _read_until(serve, "Ctrl-C stops everything", timeout=120)
        assert "seeded: Codertocat/Hello-World#2" in banner, banner
        for command in commands[1:-1]:
            answer = subprocess.run(["bash", "-c", command], cwd=REPO_ROOT, env=env, capture_output=True,
                                    text=True, timeout=60)
            assert answer.returncode == 0 and answer.stdout.startswith("202 "), (command, answer.stdout, answer.stderr)
        deadline, body = time.monotonic() + 240, None
        while time.monotonic() < deadline:
            out = subprocess.run(["bash", "-c", commands[-1]], cwd=REPO_ROOT, env=env, capture_output=True,
                                 text=True, timeout=30).stdout
            comments = [c for c in json.loads(out or "[]") if c["user"]["login"] == "etriage[bot]"]
            if comments and "### CI logs" in comments[0]["body"]:
                assert len(comments) == 1, comments  # one living comment, edited
                body = comments[0]["body"]
                break
            time.sleep(1)  # the double is in the serve process: nothing to wait on but its API
        assert body is not None, "no comment with the CI logs on the double:\n" + out
        head = json.loads((SEED / "payloads" / "pull_request.opened.json").read_text())["pull_request"]["head"]["sha"]
        assert "<!-- etriage:summary -->" in body and head[:12] in body
        assert "documentation-only change" in body  # the pull_request triage, on the seeded commits
        assert "job `unittest / linux`" in body and "test_c10d_spawn_gloo.py" in body  # the recorded log
        serve.send_signal(signal.SIGTERM)
        rest, _ = serve.communicate(timeout=60)
        assert serve.returncode == 0 and "etriage serve: stopped" in rest
    finally:
        if serve.poll() is None:
            os.killpg(serve.pid, signal.SIGKILL)
            serve.wait()


def _read_until(process: subprocess.Popen, text: str, timeout: float) -> str:
    lines, deadline = [], time.monotonic() + timeout
    for line in process.stdout:
        lines.append(line)
        if text in line or time.monotonic() > deadline:
            break
    out = "".join(lines)
    assert text in out, f"`etriage serve` did not start:\n{out[-3000:]}"
    return out


def test_serve_refuses_a_seed_without_the_double(tmp_path):
    result = subprocess.run([sys.executable, "-m", "etriage.cli", "serve", "--seed", str(SEED),
                             "--data-dir", str(tmp_path)], cwd=REPO_ROOT, capture_output=True, text=True,
                            env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)}, timeout=60)
    assert result.returncode == 2 and "add --github-double" in result.stderr
    assert "Traceback" not in result.stderr


# ---- the seed ----------------------------------------------------------------------------------
def test_the_seed_fills_the_double_with_what_the_payloads_name():
    payloads = {name: json.loads((SEED / "payloads" / name).read_text()) for name in seed_double.PAYLOADS}
    pull = payloads["pull_request.opened.json"]["pull_request"]
    run = payloads["workflow_run.completed.json"]["workflow_run"]
    with GitHubDouble() as double:
        seeded = seed_double.seed(double, SEED)
        repo = seeded.repository
        assert payloads["pull_request.opened.json"]["repository"]["full_name"] == repo
        assert payloads["workflow_run.completed.json"]["repository"]["full_name"] == repo
        state = double.pulls[(repo, pull["number"])]
        assert (state.head_sha, state.base_sha) == (pull["head"]["sha"], pull["base"]["sha"])
        assert state.files == [("docs/usage.md", "modified")]
        assert double.permissions[(repo, pull["user"]["login"])] == "write"
        # git: the base branch and refs/pull/N/head are the payload's commits
        git_dir = double.git.git_dir(repo)
        refs = subprocess.run(["git", "--git-dir", str(git_dir), "show-ref"], capture_output=True, text=True,
                              check=True).stdout
        assert f"{pull['base']['sha']} refs/heads/{pull['base']['ref']}" in refs
        assert f"{pull['head']['sha']} refs/pull/{pull['number']}/head" in refs
        # the failed run of the head, its job and the recorded log (markers stripped)
        assert double.workflow_runs[(repo, run["id"])]["head_sha"] == run["head_sha"] == pull["head"]["sha"]
        [job] = [j for (r, _), j in double.jobs.items() if r == repo]
        assert job["conclusion"] == "failure" and job["run_id"] == run["id"]
        log = double.logs[job["id"]]
        assert "test_c10d_spawn_gloo.py" in log and "#=MATCH=#" not in log and "#=SOURCE=#" not in log
    installation = payloads["installation.created.json"]["installation"]
    assert installation["id"] == payloads["pull_request.opened.json"]["installation"]["id"] == seeded.installation
    assert installation["account"]["login"] == repo.split("/")[0]


def test_the_commits_get_the_same_ids_every_time(tmp_path):
    data = seed_double.read_seed(SEED)
    first = seed_double.build_repository(data, tmp_path / "a").shas
    assert seed_double.build_repository(data, tmp_path / "b").shas == first


def test_stale_payloads_are_refused_with_the_file_named(tmp_path):
    seed_dir = tmp_path / "seed"
    shutil.copytree(SEED, seed_dir)
    text = (seed_dir / "seed.yaml").read_text()
    (seed_dir / "seed.yaml").write_text(text.replace("message: Initial commit", "message: Initial commit!"))
    with GitHubDouble() as double:
        with pytest.raises(seed_double.SeedError, match=r"pull_request\.opened\.json, workflow_run\.completed\.json "
                                                          r"do not match seed\.yaml.*python -m etriage\.dev\.seed_double"):
            seed_double.seed(double, seed_dir)
        assert double.pulls == {}  # nothing half-seeded
        seed_double.write_payloads(seed_dir)  # what the error says to run
        seed_double.seed(double, seed_dir)
        assert double.pulls


@pytest.mark.parametrize("edit, error", [
    (lambda t: t.replace("commit: head", "commit: tip"), "workflow_run.commit: unknown commit 'tip'"),
    (lambda t: t.replace("number: 2", "number: two"), "line 25: pull_request.number: must be an integer"),
    (lambda t: t.replace("pytest_failure.txt", "../../../../etc/passwd"), "is not a recorded log"),
    (lambda t: t + "extra: 1\n", "top level: unknown key 'extra'"),
    (lambda t: "repository: [\n", "not valid YAML"),
])
def test_a_bad_seed_is_refused_with_its_line(tmp_path, edit, error):
    seed_dir = tmp_path / "seed"
    shutil.copytree(SEED, seed_dir)
    (seed_dir / "seed.yaml").write_text(edit((seed_dir / "seed.yaml").read_text()))
    with pytest.raises(seed_double.SeedError, match=re.escape(error)):
        seed_double.read_seed(seed_dir)
    with pytest.raises(seed_double.SeedError, match="cannot read it"):
        seed_double.read_seed(tmp_path / "nowhere")
