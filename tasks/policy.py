"""What a pull request's triage may do, decided before anything runs.

- Suites and targets of an automatic run: the repository decides, the worker bounds. The
  default branch's `.github/etriage.yml` `triage.suites` / `triage.targets`, when the file
  writes them, are the run's, limited to the worker's ETRIAGE_SUITES / ETRIAGE_TARGETS (an
  allow-list; an empty ETRIAGE_SUITES allows every suite). A key the file leaves out (or no file,
  or a broken one) leaves the worker's setting in force: ETRIAGE_TARGETS, and ETRIAGE_SUITES or
  else the plan's choice. A command's own suites/targets replace all of this. `triage.paths`
  (glob -> backend) goes to the plan, asked before the tables' areas.
- Targets: plus the repository's device targets (its `devices:` section, not bounded by
  ETRIAGE_TARGETS); a device-kind target runs only when `bot.commands.devices_allowed` says so
  (the PR's author has write access, or a maintainer said `/etriage ok-to-test` for this head).
- A PR that edits .github/etriage.yml gets that file validated on its check run; the PR's
  version is never the config in force (that is always the default branch's).
"""
from __future__ import annotations

import re

import yaml

from bot.commands import devices_allowed
from bot.github_client import GitHubClient
from bot.repo_config import PATH, validate_repo_config
from tasks.pipeline.tables import load_tables



def written_triage_keys(text: str | None) -> frozenset[str]:
    """The keys the file's own `triage:` section sets; bot.repo_config fills the others with
    defaults. Text that is not YAML writes nothing (bot.repo_config reports the error)."""
    try:
        data = yaml.safe_load(text) if text else None
    except yaml.YAMLError:
        return frozenset()
    triage = data.get("triage") if isinstance(data, dict) else None
    return frozenset(triage) if isinstance(triage, dict) else frozenset()


def _chosen(ctx, gh: GitHubClient, repo: str, key: str,
            requested) -> tuple[list[str] | None, list[str]]:
    """(names, notes) for `key` ("suites" | "targets"): a command's own; else the file's
    `triage.<key>` within the worker's setting (empty: no bound), with a note on the names left
    out; None when the file does not say (the worker's setting is in force)."""
    if requested:
        return list(requested), []
    written = ctx.written_triage(gh, repo).get(key)
    allowed = getattr(ctx.options, key)
    if written is None or not allowed:
        return (None if written is None else list(written)), []
    left_out = [name for name in written if name not in allowed]
    notes = [f"Not run: {key[:-1]}(s) {_names(left_out)} of .github/etriage.yml; this worker runs "
             f"only {_names(allowed)} (ETRIAGE_{key.upper()})."] if left_out else []
    return [name for name in written if name in allowed], notes


def choose_suites(ctx, gh: GitHubClient, repo: str,
                  requested) -> tuple[list[str] | None, list[str]]:
    """(the pipeline's suites, None: the plan decides; notes). See the module docstring for the
    precedence. An empty list means nothing may run; names the pipeline has no table for are
    left out with a note."""

    chosen, notes = _chosen(ctx, gh, repo, "suites", requested)
    if chosen is None:
        chosen = list(ctx.options.suites)
        if not chosen:
            return None, []
    chosen = list(dict.fromkeys(chosen))
    known = load_tables().suites
    if [s for s in chosen if s not in known]:
        notes.append(f"Not run: suite(s) {_names(s for s in chosen if s not in known)}; this "
                     "worker's pipeline has no such suite.")
    return [s for s in chosen if s in known], notes


def choose_targets(ctx, gh: GitHubClient, repo: str, pr: int, pull: dict,
                   requested) -> tuple[list[str], list[str]]:
    """(targets for this run, notes on the ones left out). The repository's `triage.targets`
    within ETRIAGE_TARGETS (module docstring); its device targets join automatic runs when its
    config enables them, but a device-kind target (automatic or requested) runs only when
    `bot.commands.devices_allowed`: the PR's author has write access, or a maintainer said
    `/etriage ok-to-test` for exactly this head."""

    config = ctx.repo_config_or_defaults(gh, repo)
    enabled = config.device_targets()
    chosen, notes = _chosen(ctx, gh, repo, "targets", requested)
    wanted = list(dict.fromkeys((chosen if chosen is not None else list(ctx.options.targets))
                                + ([] if requested else sorted(enabled))))
    devices = [t for t in wanted if t in config.targets and config.targets[t].kind == "device"]
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
                    else 1, "title": f"{PATH} is invalid", "message": e, "level": "failure"}
                   for e in errors]
    lines = [f"`{PATH}` in this pull request has {len(errors)} problem(s); the bot keeps the "
             "default branch's configuration, and would reject this one once merged:"]
    return ("\n".join(lines + [f"- {e}" for e in errors]), annotations)


def add_config_check(payload, check) -> None:
    """Put `config_change_check`'s result on the PublishPayload's check-run output; an invalid
    file fails the check, whatever the suites said."""
    if check is None:
        return
    text, annotations = check
    payload.check_text = "\n\n".join(filter(None, [f"## Repository configuration\n{text}",
                                                   payload.check_text]))
    payload.annotations = list(payload.annotations) + annotations
    if annotations:  # merged, it would turn the bot's triage off for the repository: not mergeable
        payload.check_title = f"{payload.check_title} · .github/etriage.yml: {len(annotations)} problem(s)"[:255]
        payload.check_conclusion = "failure"
