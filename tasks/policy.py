"""What a pull request's triage may do, decided before anything runs.

- Targets: the worker's (ETRIAGE_TARGETS) or the command's, plus the repository's device
  targets; a device-kind target runs only when `bot.commands.devices_allowed` says so (the PR's
  author has write access, or a maintainer said `/etriage ok-to-test` for exactly this head).
- A PR that edits .github/etriage.yml gets that file validated on its check run; the PR's
  version is never the config in force (that is always the default branch's).
"""
from __future__ import annotations

import re

from bot.github_client import GitHubClient


def choose_targets(ctx, gh: GitHubClient, repo: str, pr: int, pull: dict,
                   requested) -> tuple[list[str], list[str]]:
    """(targets for this run, notes on the ones left out). The repository's device targets
    join automatic runs when its config enables them, but a device-kind target (automatic
    or requested) runs only when `bot.commands.devices_allowed`: the PR's author has write
    access, or a maintainer said `/etriage ok-to-test` for exactly this head."""
    from bot.commands import devices_allowed
    from tasks.pipeline.tables import load_tables

    config = ctx.repo_config_or_defaults(gh, repo)
    enabled = config.device_targets()
    wanted = list(dict.fromkeys(list(requested or ctx.options.targets)
                                + ([] if requested else sorted(enabled))))
    devices = [t for t in wanted if t in config.targets and config.targets[t].kind == "device"]
    notes = []
    if [t for t in devices if t not in enabled]:
        notes.append(f"Not run on {_names(t for t in devices if t not in enabled)}: device runs "
                     "are not enabled for this repository (`devices:` in .github/etriage.yml).")
    devices = [t for t in devices if t in enabled]
    if devices and not devices_allowed(gh, ctx.store, repo, pr, head_sha=pull["head_sha"],
                                       pr_author=pull["author"]):
        notes.append(f"Not run on {_names(devices)} (devices): @{pull['author']} has no write "
                     f"access here, so a maintainer must first say `/etriage ok-to-test` for "
                     f"`{pull['head_sha'][:7]}`.")
        devices = []
    wanted = [t for t in wanted if t not in config.targets or config.targets[t].kind != "device"
              or t in devices]
    runnable = load_tables().targets
    if [t for t in wanted if t not in runnable]:
        notes.append(f"Not run on {_names(t for t in wanted if t not in runnable)}: "
                     "this worker has no runner for it.")
    return [t for t in wanted if t in runnable], notes


def _names(names) -> str:
    return ", ".join(f"`{name}`" for name in names)


def config_change_check(gh: GitHubClient, repo: str, pr: int, head_sha: str):
    """(markdown, annotations) when the PR edits .github/etriage.yml, else None. The PR's
    version is read only to validate it: the config in force stays the default branch's."""
    from bot.repo_config import PATH, validate_repo_config

    status = dict(gh.pull_files(repo, pr)).get(PATH)
    if status is None:
        return None
    if status == "removed":
        return (f"This pull request deletes `{PATH}`: once merged, the defaults apply.", [])
    text = gh.read_file(repo, PATH, ref=head_sha)
    errors = validate_repo_config(text) if text is not None else []
    if not errors:
        return (f"`{PATH}` in this pull request is valid; it takes effect once merged into "
                "the default branch.", [])
    annotations = [{"path": PATH, "start_line": int(m.group(1)) if (m := re.match(r"line (\d+): ", e))
                    else 1, "title": f"{PATH} is invalid", "message": e, "level": "warning"}
                   for e in errors]
    lines = [f"`{PATH}` in this pull request has {len(errors)} problem(s); the bot keeps the "
             "default branch's configuration, and would reject this one once merged:"]
    return ("\n".join(lines + [f"- {e}" for e in errors]), annotations)


def add_config_check(payload, check) -> None:
    """Put `config_change_check`'s result on the PublishPayload's check-run output."""
    if check is None:
        return
    text, annotations = check
    payload.check_text = "\n\n".join(filter(None, [f"## Repository configuration\n{text}",
                                                   payload.check_text]))
    payload.annotations = list(payload.annotations) + annotations
    if annotations:
        payload.check_title = f"{payload.check_title} · .github/etriage.yml: {len(annotations)} problem(s)"[:255]
