"""The dashboard's mutes (/dashboard/mutes/): every mute of the repositories the viewer may
read, in force or not, each with the failures it covered, and a small form for a maintainer.

Adding or lifting a mute is what `/etriage mute` and `/etriage unmute` do (bot.mutes, the same
checks), by a GitHub login with push access to the repository (the permission the dashboard's
retry needs, bot.dashboard.auth), with the session's CSRF token. Nothing is hidden here: an
expired or lifted mute stays listed, marked so.
"""
from __future__ import annotations

from datetime import datetime, timezone

from flask import Blueprint, abort, redirect, render_template, request, url_for
from sqlalchemy import func, select
from werkzeug.exceptions import HTTPException

from bot import mutes
from bot.dashboard.auth import check_csrf, viewer
from bot.dashboard.context import state
from bot.dashboard.pages import SECURITY_HEADERS

blueprint = Blueprint("dashboard_mutes", __name__, url_prefix="/dashboard/mutes")
SHOWN = 200  # mutes listed, newest first
FAILURES_SHOWN = 5  # per mute, the latest failures it covered


@blueprint.after_request
def _security_headers(response):
    response.headers.update(SECURITY_HEADERS)
    return response


@blueprint.errorhandler(HTTPException)
def _error_page(error: HTTPException):
    return render_template("dashboard/message.html", title=f"{error.code} {error.name}",
                           message=error.description), error.code


def status(row: dict, now: datetime) -> str:
    if row["lifted_at"] is not None and row["lifted_at"] <= now:
        return "lifted"
    return "in force" if row["until"] > now else "expired"


def _covered(history, row: dict, now: datetime) -> dict:
    """How many failures of the repository the mute covered while in force, and the latest ones."""
    f = history.t["failure_events"]
    end = min(t for t in (row["until"], row["lifted_at"], now) if t is not None)
    which = f.c.cluster_id == row["key"] if row["kind"] == "cluster" else f.c.test == row["key"]
    where = (f.c.repo == row["repo"], which, f.c.at >= row["created_at"], f.c.at <= end, f.c.verdict == "ignored")
    with history.engine.connect() as conn:
        total = conn.execute(select(func.count()).select_from(f).where(*where)).scalar() or 0
        latest = [dict(r) for r in conn.execute(select(f.c.pr, f.c.sha, f.c.test, f.c.at).where(*where)
                                                .order_by(f.c.at.desc()).limit(FAILURES_SHOWN)).mappings()]
    return {"total": total, "latest": latest}


@blueprint.get("/")
def mutes_page():
    now = datetime.now(timezone.utc)
    history = state().dashboard.h
    who = viewer()
    rows = [row for row in history.store.mutes() if who.may_read(row["repo"])][:SHOWN]
    for row in rows:
        row["status"] = status(row, now)
        row["covered"] = _covered(history, row, now)
        row["may_lift"] = row["status"] == "in force" and who.may_retry(row["repo"])
    writable = sorted(repo for repo in who.writable if who.may_retry(repo))
    return render_template("dashboard/mutes.html", mutes=rows, writable=writable, kinds=mutes.KINDS,
                           when=mutes.when, max_days=mutes.MAX_DURATION.days)


def _field(name: str) -> str:
    return (request.form.get(name) or "").strip()


@blueprint.post("/")
def add_mute():
    check_csrf()
    repo, kind, key = _field("repo"), _field("kind"), _field("key")
    if not viewer().may_retry(repo):
        abort(403, f"Muting needs a GitHub login with push access to {repo or 'the repository'}.")
    try:
        mutes.check_key(kind, key)
    except mutes.MuteError as error:
        abort(400, f"{kind if kind not in mutes.KINDS else key!r} {error}")
    try:
        duration = mutes.parse_duration(_field("duration"))
    except mutes.MuteError as error:
        abort(400, f"{_field('duration')!r} {error}")
    try:
        reason = mutes.check_reason(_field("reason"))
    except mutes.MuteError as error:
        abort(400, str(error))
    store = state().dashboard.h.store
    if kind == "cluster" and mutes.known_cluster(store, key) is None:
        abort(404, f"No failure cluster {key} is known here.")
    store.mute(repo, kind, key, until=datetime.now(timezone.utc) + duration, reason=reason,
               by=viewer().login, source="dashboard")
    return redirect(url_for("dashboard_mutes.mutes_page"), 303)


@blueprint.post("/<int(max=2147483647):mute_id>/lift")
def lift(mute_id: int):
    check_csrf()
    store = state().dashboard.h.store
    row = next((r for r in store.mutes() if r["id"] == mute_id), None)
    if row is None or not viewer().may_read(row["repo"]):
        abort(404, f"No mute {mute_id}.")
    if not viewer().may_retry(row["repo"]):
        abort(403, f"Lifting a mute needs a GitHub login with push access to {row['repo']}.")
    if not store.lift_mute(row["repo"], row["kind"], row["key"], viewer().login):
        abort(409, f"Mute {mute_id} is not in force any more.")
    return redirect(url_for("dashboard_mutes.mutes_page"), 303)
