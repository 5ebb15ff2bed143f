"""Warm before the PR arrives: a pushed branch tip's environment, made on the `build` queue.

A `push` to a branch pull requests target (bot/routing.py) queues `warm_environment`: the
commit's environment (tasks/environments/: its laid tree, compiled parts, torch, health) is made
now, so a PR opened on that tip finds its merge base's environment ready. Each attempt is
recorded in Redis (bot.queues.ENVIRONMENTS_KEY) for the dashboard's devices & queues page: what
is being built, how long it took, what it costs on disk. Idempotent: a redelivery finds the
environment made and takes milliseconds.
"""
from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bot import queues
from tasks import environments
from tasks.environments import store
from tasks.pipeline import gitio
from tasks.pipeline.overlay import installed_package_dir
from tasks.pipeline.sandbox import Sandbox


@dataclass
class Warmed:
    state: str  # ready | failed | skipped
    detail: str


def record(redis_client, entry: dict) -> None:
    """One environment's state, newest kept; never fails the work it describes."""
    key = f"{entry['repo']}@{entry['sha']}"
    redis_client.hset(queues.ENVIRONMENTS_KEY, key, json.dumps(entry))
    entries = redis_client.hgetall(queues.ENVIRONMENTS_KEY)
    if len(entries) > queues.ENVIRONMENTS_KEPT:
        by_age = sorted(entries.items(), key=lambda kv: json.loads(kv[1]).get("started", 0))
        redis_client.hdel(queues.ENVIRONMENTS_KEY, *[k for k, _ in by_age[:len(entries) - queues.ENVIRONMENTS_KEPT]])


def warm_environment(ctx, repo: str, branch: str, sha: str, *, checkout: str | Path | None,
                     python: str, sandbox: Sandbox, skipped: str = "") -> Warmed:
    """`checkout`: a repository holding `sha` (a local clone or a fetched worktree); None, with
    `skipped` saying why (the fetch failed), records the attempt as skipped."""
    entry = {"repo": repo, "branch": branch, "sha": sha, "state": "building", "started": time.time(),
             "seconds": None, "compiled": "", "disk_bytes": None, "reason": ""}
    if not checkout:
        entry.update(state="skipped", reason=skipped or f"no clone of {repo} on this worker")
        record(ctx.redis, entry)
        return Warmed("skipped", entry["reason"])
    try:
        gitio.resolve(checkout, sha)
    except gitio.GitError as error:
        entry.update(state="skipped", reason=str(error))
        record(ctx.redis, entry)
        return Warmed("skipped", entry["reason"])
    record(ctx.redis, entry)
    data_dir = Path(ctx.settings.data_dir)
    (data_dir / "runs").mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix="warm-", dir=data_dir / "runs"))
    try:
        context = environments.Context(repo=Path(checkout), python=python, installed=installed_package_dir(python),
                                       data_dir=data_dir, run_dir=run_dir, sandbox=sandbox,
                                       shared_store=Path(ctx.options.env_shared_store)
                                       if ctx.options.env_shared_store else None)
        env, _ = environments.environment_for(context, sha)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    ok = env.status == "ok" and env.healthy is not False
    parts = [p for p in (env.root, *env.readable) if p]
    entry.update(state="ready" if ok else "failed", seconds=round(time.time() - entry["started"], 1),
                 compiled=env.compiled, reason=env.reason or ("" if ok else env.health),
                 disk_bytes=sum(store.disk_bytes(Path(p)) for p in parts if env.compiled == "built" or p == env.root))
    record(ctx.redis, entry)
    return Warmed(entry["state"], entry["reason"] or f"{env.compiled} compiled parts, torch {env.torch}")
