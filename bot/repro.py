"""The evidence the PR comment links to, for the bot's own runs (bot.evidence.Links makes the
addresses):

    GET /evidence/<owner>/<name>/<pr>/<head>/<fingerprint>             the failure's output
    GET /evidence/<owner>/<name>/<pr>/<head>/probe/<suite>/<probe>.py  the probe, standalone

Both are read from the entries stored with the PR's run at that head (bot.evidence); nothing is
made here. Both are plain text (`nosniff`: a browser shows them, never runs them); a private
repository needs the dashboard's login (bot.dashboard.auth.require). A name that is not a
plain name, or an entry that is not stored, is a 404 saying which.
"""
from __future__ import annotations

import re

from flask import Blueprint, Response, abort

from bot.dashboard.auth import require
from bot.dashboard.context import state
from bot.evidence import Entry, entries_at

blueprint = Blueprint("evidence", __name__)
_PLAIN = r"[A-Za-z0-9_.-]{1,100}"
_HEAD = re.compile(r"[0-9a-f]{7,64}")


def _entries(owner: str, name: str, pr: int, head: str) -> list[Entry]:
    if not (re.fullmatch(_PLAIN, owner) and re.fullmatch(_PLAIN, name) and _HEAD.fullmatch(head)):
        abort(404, "not a repository and commit")
    store = state().dashboard.h.store
    return [e for e in entries_at(store.runs_for(f"{owner}/{name}", pr), head) if e.kind == "pr"]


def _text(body: str, *, filename: str | None = None) -> Response:
    response = Response(body, mimetype="text/plain")
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Content-Security-Policy"] = "default-src 'none'"
    if filename:
        response.headers["Content-Disposition"] = f'inline; filename="{filename}"'
    return response


@blueprint.get("/evidence/<owner>/<name>/<int(max=2147483647):pr>/<head>/<fingerprint>")
def artefact(owner: str, name: str, pr: int, head: str, fingerprint: str):
    refused = require(f"{owner}/{name}")
    if refused is not None:
        return refused
    for entry in _entries(owner, name, pr, head):
        if fingerprint in entry.fingerprints:
            lines = [f"{owner}/{name}#{pr} at {head[:12]}: {entry.verdict.replace('_', '-')} · {entry.category}",
                     f"{entry.title}", "", f"primary line: {entry.primary_line}", "",
                     "tests: " + ", ".join(entry.tests), f"reproduce: {entry.reproduce}", "",
                     entry.artefact or "(no output was kept)"]
            return _text("\n".join(lines) + "\n")
    abort(404, f"no failure {fingerprint[:40]} is stored for {owner}/{name}#{pr} at {head[:12]}")


@blueprint.get("/evidence/<owner>/<name>/<int(max=2147483647):pr>/<head>/probe/<suite>/<probe>.py")
def probe_script(owner: str, name: str, pr: int, head: str, suite: str, probe: str):
    refused = require(f"{owner}/{name}")
    if refused is not None:
        return refused
    for entry in _entries(owner, name, pr, head):
        if entry.script and entry.script_url.endswith(f"/probe/{suite}/{probe}.py"):
            return _text(entry.script, filename=entry.script_name)
    abort(404, f"no failed probe {suite[:40]}/{probe[:80]} is stored for {owner}/{name}#{pr} at {head[:12]}")
