"""The dashboard's pages (/dashboard/...), server-rendered and usable without JavaScript.

Each page is one query of bot.dashboard.queries rendered by a template in
bot/templates/dashboard/. Jinja escapes every value (PR titles, test ids, log lines are text);
charts are inline SVG from bot.dashboard.charts.
"""
from __future__ import annotations

from flask import Blueprint, abort, g, redirect, render_template, request, url_for
from werkzeug.exceptions import HTTPException

from bot.dashboard import charts
from bot.dashboard.auth import check_csrf, csrf_token, require, viewer
from bot.dashboard.context import state
from bot.dashboard.links import GitHubLinks
from bot.dashboard.queries import WINDOWS, FilterError, Filters, environments, queues, run_status
from bot.history import TRUNK, day_range
from bot.publisher import DispatchError
from bot.services import services

blueprint = Blueprint("dashboard", __name__, url_prefix="/dashboard")
LOG_CONTEXT = 4  # lines shown either side of the primary line; the rest collapsed


def _filters() -> Filters:
    """The query's filters, each a known value (else 400 naming the valid ones)."""
    try:
        return choices().check(Filters.from_args(request.args))
    except FilterError as error:
        abort(400, str(error))


def choices():
    """The filters' known values for this viewer, read once per request."""
    if "filter_choices" not in g:
        g.filter_choices = state().dashboard.choices(viewer())
    return g.filter_choices


@blueprint.app_template_global()
def page_url(endpoint: str, filters: Filters, **override) -> str:
    return url_for(endpoint, **{**request.view_args, **filters.args(**override)})


SECURITY_HEADERS = {
    # No script at all, nothing from elsewhere, never in a frame (the retry form cannot be
    # clickjacked): a second wall behind the escaping.
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self' data:; "
                               "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "same-origin",
}


@blueprint.after_app_request
def _security_headers(response):
    if request.blueprint in ("dashboard", "dashboard_auth"):
        response.headers.update(SECURITY_HEADERS)
    return response


@blueprint.errorhandler(HTTPException)
def _error_page(error: HTTPException):
    """Pages answer errors as pages (the app's other blueprints answer JSON)."""
    return render_template("dashboard/message.html", title=f"{error.code} {error.name}",
                           message=error.description, filters=Filters()), error.code


@blueprint.app_context_processor
def _common():
    return {"viewer": viewer(), "windows": WINDOWS, "login_enabled": bool(state().config.oauth_client_id),
            "csrf_token": csrf_token, "gh": GitHubLinks(state().config.github_web_url), "choices": choices}


@blueprint.get("/")
def overview():
    filters = _filters()
    data = state().dashboard.overview(filters, viewer())
    days = [d[5:] for d in data["days"]]
    series = {h["name"]: [p["pass_rate"] for p in h["daily"]] for h in data["health"]}
    return render_template(
        "dashboard/overview.html", data=data, trunk=data["trunk"], filters=filters,
        chart=charts.line_chart("Pass rate per backend / target, last 30 days", days, series,
                                y_label="pass rate (%)", y_bounds=(0, 100), unit="%"))


@blueprint.get("/tests/<path:test>")
def test(test: str):
    filters = _filters()
    data = state().dashboard.test(test, filters, viewer())
    if data is None:
        abort(404, f"no result of the test {test[:300]!r} is recorded in the last {filters.days} days")
    return render_template("dashboard/test.html", data=data, filters=filters)


@blueprint.get("/prs")
def prs():
    filters = _filters()
    return render_template("dashboard/prs.html", data=state().dashboard.prs(filters, viewer()), filters=filters)


@blueprint.get("/pr/<owner>/<name>/<int(max=2147483647):number>")
def pr(owner: str, name: str, number: int):
    repo = f"{owner}/{name}"
    refused = require(repo)
    if refused is not None:
        return refused
    data = state().dashboard.pr(repo, number, viewer())
    if data is None:
        abort(404, f"no triage of {repo}#{number} is recorded")
    return render_template("dashboard/pr.html", data=data, filters=Filters())


@blueprint.get("/clusters")
def clusters():
    filters = _filters()
    data = state().dashboard.clusters(filters, viewer())
    for item in data["items"]:
        item["spark"] = charts.sparkline(item["daily"], label=f"{sum(item['daily'])} failures in 30 days")
    return render_template("dashboard/clusters.html", data=data, filters=filters)


@blueprint.get("/clusters/<cluster_id>")
def cluster(cluster_id: str):
    filters = _filters()
    data = state().dashboard.cluster(cluster_id, filters, viewer())
    if data is None:
        abort(404, f"no cluster {cluster_id}")
    days = [d.isoformat()[5:] for d in day_range(30)]
    chart = charts.line_chart("Failures per day, last 30 days", days,
                              {"failures": data["cluster"]["daily"]}, y_label="failures")
    return render_template("dashboard/cluster.html", data=data, filters=filters, chart=chart)


@blueprint.get("/flaky")
def flaky():
    filters = _filters()
    return render_template("dashboard/flaky.html", data=state().dashboard.flaky(filters, viewer()), filters=filters)


@blueprint.get("/runs/<int(max=2147483647):run_id>")
def run(run_id: int):
    data = state().dashboard.run(run_id, viewer())
    if data is None:
        refused = _run_refusal(run_id)
        if refused is not None:
            return refused
        abort(404, f"no run {run_id}")
    lines, primary = data["log"]["lines"], data["log"]["primary"]
    focus_failure = None
    wanted = request.args.get("failure", "")
    if wanted:  # the failure this page is opened for (a link from a test, a cluster, the grid)
        focus_failure = next((f for f in data["failures"] if str(f["id"]) == wanted), None)
        if focus_failure is None:
            abort(404, f"run {run_id} has no failure {wanted[:30]!r}")
        if focus_failure["log_line"] is not None:
            primary = focus_failure["log_line"]
    if primary is None:  # no primary line known: the tail is what matters
        cut = max(0, len(lines) - 2 * LOG_CONTEXT)
        before, after = list(enumerate(lines[:cut])), []
        focus = [(i + cut, line) for i, line in enumerate(lines[cut:])]
    else:
        start, end = max(0, primary - LOG_CONTEXT), primary + LOG_CONTEXT + 1
        before = list(enumerate(lines[:start]))
        focus = [(i + start, line) for i, line in enumerate(lines[start:end])]
        after = [(i + end, line) for i, line in enumerate(lines[end:])]
    marked = {f["log_line"] for f in data["failures"] if f["log_line"] is not None}
    return render_template("dashboard/run.html", data=data, filters=Filters(), focus_failure=focus_failure,
                           log_before=before, log_focus=focus, log_after=after, primary=primary, marked=marked)


@blueprint.post("/runs/<int(max=2147483647):run_id>/retry")
def retry(run_id: int):
    """An abandoned run queued again (a new attempt), by a logged-in user who can push."""
    check_csrf()
    history = state().dashboard.h
    run = history.run(run_id)
    if run is None or not viewer().may_read(run["repo"]):
        abort(404, f"no run {run_id}")
    if not viewer().may_retry(run["repo"]):
        abort(403, f"Retrying a run needs a GitHub login with push access to {run['repo']}.")
    status = run_status(run)
    if status != "abandoned":
        abort(409, f"Run {run_id} is {status}; only an abandoned run is retried (a finished one: "
                   "`/etriage rerun` on the pull request).")
    pull = history.store.pull_state(run["repo"], run["pr"]) if run["pr"] != TRUNK else None
    if pull is None:
        abort(409, "The pull request's base branch and installation are not known here (no webhook "
                   "recorded them); comment `/etriage rerun` on it instead.")
    history.abandon_overdue()  # what the page showed, written before the new attempt
    new_id = history.retry(run_id)
    try:
        services().dispatcher.triage_pr(run["repo"], run["pr"], run["head_sha"], pull["base_ref"],
                                        pull["installation_id"], reason="retry")
    except DispatchError as error:
        abort(503, f"The retry could not be queued ({error}); try again in a minute.")
    return redirect(url_for("dashboard.run", run_id=new_id), 303)


def _run_refusal(run_id: int):
    """A private repository's run: a login for strangers, 404 for others."""
    history = state().dashboard.h
    t = history.t["triage_runs"]
    with history.engine.connect() as conn:
        repo = conn.execute(t.select().with_only_columns(t.c.repo).where(t.c.id == run_id)).scalar()
    return require(repo) if repo else None


@blueprint.get("/devices")
def devices():
    return render_template("dashboard/devices.html", devices=state().dashboard.devices(),
                           queues=queues(state().redis), environments=environments(state().redis),
                           filters=Filters())
