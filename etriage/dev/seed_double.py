"""What `etriage serve --github-double --seed DIR` puts into the GitHub double, so that the
README's serve + replay path ends in a posted comment instead of 404s.

DIR holds `seed.yaml` (the data: a repository, its commits, a pull request, a workflow run with a
failed job whose log is a real recorded CI log from etriage/dev/fixtures/logs/) and `payloads/`:
GitHub's real example webhooks (etriage/dev/fixtures/github/webhooks/) with only the ids, the
repository and the commit ids changed to the seeded ones, which `etriage replay` sends as they are.

The commits are built with fixed authors, committers and dates, so they get the same ids on
every machine; the payloads name those ids. `seed()` checks that the payloads in DIR are exactly
what `derived_payloads()` makes of the seed (a changed seed.yaml with stale payloads is an error
naming the file, not a silent 404); `python -m etriage.dev.seed_double DIR` writes them again.

Seeded: the repository served over git (base branch, the head's branch, refs/pull/N/head), the
pull request with its files (from the commits' diff), the author's permission, the workflow run,
its job and the job's log.
"""
from __future__ import annotations

import copy
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, Mapping

from pydantic import Field

from triage_rules import yamlmodel as ym

FIXTURES = Path(__file__).resolve().parent / "fixtures"  # the packaged copies of shared/fixtures
DEFAULT_DIR = Path(__file__).resolve().parent / "seed"
PAYLOADS = {  # payload file in DIR/payloads -> (the GitHub example it is derived from, the event)
    "installation.created.json": ("installation/created.json", "installation"),
    "pull_request.opened.json": ("pull_request/opened.json", "pull_request"),
    "workflow_run.completed.json": ("workflow_run/completed.with-pull-requests.json", "workflow_run"),
}
# Who made the seed's commits, and when: fixed, so that the commit ids are too.
GIT_IDENTITY = {"GIT_AUTHOR_NAME": "Codertocat", "GIT_AUTHOR_EMAIL": "21031067+Codertocat@users.noreply.github.com",
                "GIT_COMMITTER_NAME": "Codertocat",
                "GIT_COMMITTER_EMAIL": "21031067+Codertocat@users.noreply.github.com"}
GIT_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LC_ALL": "C", "TZ": "UTC",
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}


class SeedError(ValueError):
    """The seed directory cannot be used: what is wrong and in which file."""


# ---- the seed's data: seed.yaml ------------------------------------------------------------------
Repo = ym.pattern(r"^[A-Za-z0-9-]{1,39}/[A-Za-z0-9._-]{1,100}$", "owner/name")
Sha = ym.pattern(r"^[0-9a-f]{40}$", "a commit id")


class Commit(ym.StrictModel):
    parent: ym.Str | None = None  # another commit of the seed; None: the first commit
    branch: ym.Str
    message: ym.Str
    date: ym.Str  # author and committer date, e.g. "2019-05-15T15:19:27Z"
    files: Mapping[ym.Str, ym.Str | None]  # path -> text on top of the parent's tree (None: deleted)


class PullRequest(ym.StrictModel):
    number: Annotated[ym.Int, Field(gt=0)]
    base: ym.Str  # a commit of the seed
    head: ym.Str
    author: ym.Str
    author_permission: Literal["admin", "maintain", "write", "triage", "read", "none"] = "write"


class Job(ym.StrictModel):
    id: Annotated[ym.Int, Field(gt=0)]
    name: ym.Str
    conclusion: Literal["success", "failure", "cancelled", "timed_out"]
    log: ym.Str  # a recorded log, relative to etriage/dev/fixtures


class WorkflowRun(ym.StrictModel):
    id: Annotated[ym.Int, Field(gt=0)]
    commit: ym.Str
    check_suite_id: Annotated[ym.Int, Field(gt=0)]
    jobs: tuple[Job, ...]


class Seed(ym.StrictModel):
    repository: Repo
    installation: Annotated[ym.Int, Field(gt=0)]
    commits: Mapping[ym.Str, Commit]
    pull_request: PullRequest
    workflow_run: WorkflowRun


def read_seed(seed_dir: Path) -> Seed:
    path = Path(seed_dir) / "seed.yaml"
    try:
        located = ym.read(path.read_text())
    except OSError as error:
        raise SeedError(f"{path}: cannot read it ({error.strerror or error}); a seed directory has a seed.yaml") from None
    except ym.YamlSyntaxError as error:
        raise SeedError(f"{path}: line {error.line}: not valid YAML: {error.message}") from None
    seed, problems = ym.validate(Seed, located)
    if problems:
        raise SeedError(f"{path}: " + "; ".join(f"line {p.line}: {p.where or 'top level'}: {p.message}"
                                                for p in problems))
    names = set(seed.commits)
    for what, name in [("pull_request.base", seed.pull_request.base), ("pull_request.head", seed.pull_request.head),
                       ("workflow_run.commit", seed.workflow_run.commit),
                       *[(f"commits.{c}.parent", commit.parent) for c, commit in seed.commits.items() if commit.parent]]:
        if name not in names:
            raise SeedError(f"{path}: {what}: unknown commit {name!r} (the seed's commits: {', '.join(sorted(names))})")
    for job in seed.workflow_run.jobs:
        log = (FIXTURES / job.log).resolve()
        if not log.is_relative_to(FIXTURES) or not log.is_file():
            raise SeedError(f"{path}: workflow_run.jobs: {job.log!r} is not a recorded log under {FIXTURES}")
    return seed


# ---- the commits -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Built:
    work_tree: Path
    shas: dict[str, str]  # commit name -> id
    files: list[tuple[str, str]]  # the pull request's files: (path, GitHub's status)


def build_repository(seed: Seed, where: Path) -> Built:
    """The seed's commits in a new repository at `where`, each on its branch."""
    where.mkdir(parents=True)
    git(where, "init", "-q")
    shas: dict[str, str] = {}
    todo = dict(seed.commits)
    while todo:  # parents first
        name, commit = next((n, c) for n, c in todo.items() if c.parent is None or c.parent in shas)
        del todo[name]
        if commit.parent:
            git(where, "checkout", "-q", "--detach", shas[commit.parent])
        else:  # a commit without parents: an empty index and work tree first
            git(where, "symbolic-ref", "HEAD", f"refs/heads/seed-{name}")
            git(where, "read-tree", "--empty")
            git(where, "clean", "-fdqx")
        for path, text in commit.files.items():
            target = where / path
            if not target.resolve().is_relative_to(where.resolve()):
                raise SeedError(f"seed.yaml: commits.{name}.files: {path!r} leaves the repository")
            if text is None:
                git(where, "rm", "-q", "--", path)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            git(where, "add", "--", path)
        dated = {"GIT_AUTHOR_DATE": commit.date, "GIT_COMMITTER_DATE": commit.date}
        git(where, "-c", "commit.gpgsign=false", "commit", "-q", "--allow-empty", "-m", commit.message, env=dated)
        shas[name] = git(where, "rev-parse", "HEAD")
        git(where, "branch", "-f", commit.branch, shas[name])
    pull = seed.pull_request
    changes = git(where, "diff", "--name-status", "--no-renames", shas[pull.base], shas[pull.head])
    status = {"A": "added", "M": "modified", "D": "removed"}
    files = [(line.split("\t", 1)[1], status.get(line[0], "changed")) for line in changes.splitlines() if line]
    return Built(where, shas, files)


def git(where: Path, *args: str, env: dict | None = None) -> str:
    result = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True,
                            env={**GIT_ENV, **GIT_IDENTITY, **(env or {})})
    if result.returncode != 0:
        raise SeedError(f"git {' '.join(args[:2])} failed while building the seed: {result.stderr.strip()[-300:]}")
    return result.stdout.strip()


# ---- the payloads ---------------------------------------------------------------------------------
def derived_payloads(seed: Seed, shas: Mapping[str, str]) -> dict[str, dict]:
    """GitHub's example payloads with the seed's installation, repository and commit ids."""
    examples = FIXTURES / "github" / "webhooks"
    load = lambda name: json.loads((examples / PAYLOADS[name][0]).read_text())  # noqa: E731
    pull, run = seed.pull_request, seed.workflow_run
    base, head = seed.commits[pull.base], seed.commits[pull.head]

    installation = load("installation.created.json")
    installation["installation"]["id"] = seed.installation
    installation["installation"]["account"]["login"] = seed.repository.split("/")[0]

    opened = load("pull_request.opened.json")
    pr = opened["pull_request"]
    pr["number"], opened["number"] = pull.number, pull.number
    pr["head"].update(sha=shas[pull.head], ref=head.branch)
    pr["base"].update(sha=shas[pull.base], ref=base.branch)
    pr["user"]["login"] = pull.author
    opened["installation"] = {"id": seed.installation, "node_id": opened["installation"]["node_id"]}

    completed = load("workflow_run.completed.json")
    workflow = completed["workflow_run"]
    workflow.update(id=run.id, head_sha=shas[run.commit], head_branch=seed.commits[run.commit].branch,
                    check_suite_id=run.check_suite_id, conclusion="failure", status="completed")
    for linked in workflow["pull_requests"]:
        linked["number"] = pull.number
        linked["head"].update(sha=shas[pull.head], ref=head.branch)
        linked["base"].update(sha=shas[pull.base], ref=base.branch)
    completed["repository"] = copy.deepcopy(opened["repository"])  # the seeded repository
    completed["repository"]["full_name"] = seed.repository
    completed["installation"] = {"id": seed.installation}
    return {"installation.created.json": installation, "pull_request.opened.json": opened,
            "workflow_run.completed.json": completed}


def payload_text(payload: dict) -> str:
    return json.dumps(payload, indent=2, ensure_ascii=False) + "\n"


def recorded_log(relative: str) -> str:
    """A recorded CI log with the fixture's markers taken out (`#=SOURCE=#` lines, the
    `#=MATCH=# ` prefix and the ‹ › around the matched text), as the job wrote it."""
    lines = (FIXTURES / relative).read_text().splitlines()
    return "\n".join(line.replace("#=MATCH=# ", "", 1).replace("‹", "").replace("›", "")
                     for line in lines if not line.startswith("#=SOURCE=#")) + "\n"


# ---- seeding ---------------------------------------------------------------------------------------
def seed(double, seed_dir: Path) -> Seed:
    """Put the seed into the running `double` (its git hosting keeps a copy of the commits)."""
    seed_dir = Path(seed_dir)
    data = read_seed(seed_dir)
    pull, run = data.pull_request, data.workflow_run
    with tempfile.TemporaryDirectory(prefix="etriage-seed-") as tmp:
        built = build_repository(data, Path(tmp) / "repository")
        stale = [name for name, payload in derived_payloads(data, built.shas).items()
                 if _read_payload(seed_dir, name) != payload_text(payload)]
        if stale:
            raise SeedError(f"{seed_dir / 'payloads'}: {', '.join(stale)} do not match seed.yaml (its commit ids "
                            f"or numbers changed); write them again: python -m etriage.dev.seed_double {seed_dir}")
        double.git.create(data.repository, source=built.work_tree)  # its branches, served over git
    double.add_pull(data.repository, pull.number, built.shas[pull.head], built.shas[pull.base],
                    head_ref=data.commits[pull.head].branch, base_ref=data.commits[pull.base].branch,
                    author=pull.author, files=built.files)
    double.set_permission(data.repository, pull.author, pull.author_permission)
    double.add_workflow_run(data.repository, run.id, built.shas[run.commit], [
        {"id": job.id, "name": job.name, "conclusion": job.conclusion, "log": recorded_log(job.log),
         "head_branch": data.commits[run.commit].branch} for job in run.jobs],
        check_suite_id=run.check_suite_id)
    return data


def _read_payload(seed_dir: Path, name: str) -> str | None:
    try:
        return (seed_dir / "payloads" / name).read_text()
    except OSError:
        return None


def write_payloads(seed_dir: Path) -> list[Path]:
    """(Re)write DIR/payloads from seed.yaml and the GitHub examples."""
    data = read_seed(seed_dir)
    with tempfile.TemporaryDirectory() as tmp:
        built = build_repository(data, Path(tmp) / "repository")
    written = []
    for name, payload in derived_payloads(data, built.shas).items():
        path = Path(seed_dir) / "payloads" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(payload_text(payload))
        written.append(path)
    return written


if __name__ == "__main__":
    for written in write_payloads(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_DIR):
        print(written)
