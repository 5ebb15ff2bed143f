"""The read-only JSON API under /api/, mirroring the pages (the same queries), described by the
OpenAPI 3.1 document at /api/openapi.json. Errors are JSON {"status": "error", "detail": ...}."""
from __future__ import annotations

from flask import Blueprint, jsonify, request

from bot.dashboard.auth import viewer
from bot.dashboard.context import state
from bot.dashboard.queries import WINDOWS, FilterError, Filters, environments, queues

blueprint = Blueprint("dashboard_api", __name__, url_prefix="/api")


def _error(status: int, detail: str):
    return jsonify({"status": "error", "detail": detail}), status


def _filters() -> Filters:
    return Filters.from_args(request.args)


@blueprint.errorhandler(FilterError)
def _bad_filter(error):
    return _error(400, str(error))


@blueprint.get("/overview")
def overview():
    return jsonify(state().dashboard.overview(_filters(), viewer()))


@blueprint.get("/prs")
def prs():
    return jsonify(state().dashboard.prs(_filters(), viewer()))


@blueprint.get("/prs/<owner>/<name>/<int(max=2147483647):number>")
def pr(owner: str, name: str, number: int):
    data = state().dashboard.pr(f"{owner}/{name}", number, viewer())
    return jsonify(data) if data else _error(404, f"no triage of {owner}/{name}#{number} that you may read")


@blueprint.get("/clusters")
def clusters():
    return jsonify(state().dashboard.clusters(_filters(), viewer()))


@blueprint.get("/clusters/<cluster_id>")
def cluster(cluster_id: str):
    data = state().dashboard.cluster(cluster_id, _filters(), viewer())
    return jsonify(data) if data else _error(404, f"no cluster {cluster_id} that you may read")


@blueprint.get("/flaky")
def flaky():
    return jsonify(state().dashboard.flaky(_filters(), viewer()))


@blueprint.get("/runs/<int(max=2147483647):run_id>")
def run(run_id: int):
    data = state().dashboard.run(run_id, viewer())
    return jsonify(data) if data else _error(404, f"no run {run_id} that you may read")


@blueprint.get("/devices")
def devices():
    return jsonify({"devices": state().dashboard.devices(), "queues": queues(state().redis),
                    "environments": environments(state().redis)})


@blueprint.get("/openapi.json")
def openapi():
    return jsonify(OPENAPI)


# ---- the OpenAPI document ---------------------------------------------------------------------
def _nullable(kind: str | list) -> dict:
    kinds = kind if isinstance(kind, list) else [kind]
    return {"type": [*kinds, "null"]}


STR, INT, NUM, BOOL = {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"}
TIME = {"type": ["string", "null"], "format": "date-time"}
COUNTS = {"type": "object", "additionalProperties": {"type": "integer"}}


def _object(properties: dict, required=None) -> dict:
    return {"type": "object", "properties": properties,
            "required": list(required if required is not None else properties)}


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _list_of(name: str) -> dict:
    return {"type": "array", "items": _ref(name)}


SCHEMAS = {
    "Error": _object({"status": {"const": "error"}, "detail": STR}),
    "Pagination": _object({"page": INT, "pages": INT, "total": INT, "per_page": INT}),
    "Filters": {"type": "object", "additionalProperties": {"type": ["string", "integer"]}},
    "PrSummary": _object({"repo": STR, "pr": INT, "title": STR, "author": STR, "head_sha": STR,
                          "latest_run": INT, "last_run_at": TIME, "status": _nullable("string"),
                          "conclusion": _nullable("string"), "counts": COUNTS}),
    "Health": _object({"name": STR, "backend": STR, "target": STR, "pass_rate_7d": _nullable("number"),
                       "pass_rate_30d": _nullable("number"), "runs_30d": INT,
                       "daily": {"type": "array", "items": _object({"day": STR, "pass_rate": _nullable("number")})}}),
    "ClusterRef": _object({"id": STR, "title": _nullable("string"), "category": _nullable("string")},
                          required=["id"]),
    "Cluster": _object({"id": STR, "category": _nullable("string"), "title": _nullable("string"),
                        "owners": {"type": ["array", "null"], "items": STR}, "failures": INT, "prs": INT,
                        "trunk_failures": INT, "first_seen": TIME, "last_seen": TIME,
                        "daily": {"type": "array", "items": INT}}),
    "Failure": _object({"test": STR, "target": STR, "verdict": STR, "category": STR, "rule": _nullable("string"),
                        "confidence": _nullable("number"), "primary_line": _nullable("string"),
                        "cluster_id": _nullable("string"), "suspects": {"type": ["array", "null"]}},
                       required=["test", "target", "verdict", "category"]),
    "Run": _object({"id": INT, "repo": STR, "pr": INT, "head_sha": _nullable("string"), "trigger": _nullable("string"),
                    "status": _nullable("string"), "conclusion": _nullable("string"), "attempt": _nullable("integer"),
                    "started_at": TIME, "finished_at": TIME, "deadline_at": TIME,
                    "stage_seconds": {"type": ["object", "null"]}, "counts": {"type": ["object", "null"]}},
                   required=["id", "repo", "pr", "status"]),
    "Push": _object({"id": INT, "head_sha": _nullable("string"), "trigger": _nullable("string"),
                     "status": _nullable("string"), "conclusion": _nullable("string"),
                     "attempt": _nullable("integer"), "started_at": TIME, "finished_at": TIME,
                     "counts": {"type": ["object", "null"]}, "stage_seconds": {"type": ["object", "null"]}},
                    required=["id", "head_sha", "status", "started_at"]),
    "Flaky": _object({"repo": STR, "test": STR, "target": STR, "runs": INT, "failures": INT, "flaky": INT,
                      "rate": NUM, "lower": NUM, "last_flaky_at": TIME, "last_flaky_run": _nullable("integer"),
                      "rate_7d": _nullable("number"), "rate_before": _nullable("number"),
                      "trend": {"enum": ["new", "rising", "falling", "steady"]},
                      "flaky_targets": {"type": "array", "items": STR}}),
    "Queue": _object({"queue": STR, "depth": INT, "oldest_age_seconds": _nullable("number")}),
    "Environment": _object({"repo": STR, "branch": _nullable("string"), "sha": STR,
                            "state": {"enum": ["building", "ready", "failed", "skipped"]},
                            "started": _nullable("number"), "seconds": _nullable("number"),
                            "compiled": _nullable("string"), "disk_bytes": _nullable("integer"),
                            "reason": _nullable("string")}, required=["repo", "sha", "state"]),
    "Device": _object({"id": STR, "name": _nullable("string"), "target": _nullable("string"),
                       "soc": _nullable("string"), "host": _nullable("string"), "status": _nullable("string"),
                       "lease_holder": _nullable("string"), "last_seen": TIME}, required=["id", "status"]),
}
SCHEMAS.update({
    "Overview": _object({
        "filters": _ref("Filters"), "days": {"type": "array", "items": STR},
        "health": _list_of("Health"), "open_prs_with_new_failures": _list_of("PrSummary"),
        "trunk_failures_now": {"type": "array", "items": {"allOf": [_ref("ClusterRef"), _object(
            {"failures_48h": INT, "tests": INT, "last": TIME})]}},
        "busiest_clusters": {"type": "array", "items": {"allOf": [_ref("ClusterRef"), _object({"failures_7d": INT})]}}}),
    "PrList": _object({"filters": _ref("Filters"), "pagination": _ref("Pagination"), "items": {
        "type": "array", "items": {"allOf": [_ref("PrSummary"), _object({"runs": INT})]}}}),
    "PrPage": _object({"repo": STR, "pr": INT, "title": _nullable("string"), "author": _nullable("string"),
                       "latest_run": INT, "counts": COUNTS, "comment": STR,
                       "failures": {"type": "array", "items": {"allOf": [_ref("Failure"), _object(
                           {"seen_on_trunk": BOOL})]}},
                       "pushes": _list_of("Push")}),
    "ClusterList": _object({"filters": _ref("Filters"), "pagination": _ref("Pagination"), "items": _list_of("Cluster")}),
    "ClusterPage": _object({"cluster": {"allOf": [_ref("Cluster"), _object({"sample_line": _nullable("string")})]},
                            "pagination": _ref("Pagination"),
                            "occurrences": {"type": "array", "items": _object({
                                "run_id": INT, "repo": STR, "pr": INT, "test": STR, "target": STR, "verdict": STR,
                                "primary_line": _nullable("string"), "at": TIME})},
                            "primary_lines": {"type": "array", "items": _object({"line": _nullable("string"), "count": INT})},
                            "prs": {"type": "array", "items": _object({"repo": STR, "pr": INT, "failures": INT, "last": TIME})},
                            "jobs": {"type": "array", "items": _object({"source": STR, "failures": INT})}}),
    "FlakyList": _object({"filters": _ref("Filters"), "pagination": _ref("Pagination"), "items": _list_of("Flaky")}),
    "RunPage": _object({"run": _ref("Run"),
                        "suites": {"type": "array", "items": _object({"suite": STR, "targets": {"type": "array", "items": _object({
                            "target": STR, "passed": INT, "failed": INT, "flaky": INT, "skipped": INT,
                            "tests": {"type": "array"}})}})},
                        "failures": _list_of("Failure"),
                        "log": _object({"lines": {"type": "array", "items": STR}, "primary": _nullable("integer")})}),
    "DevicesPage": _object({"devices": _list_of("Device"), "queues": _list_of("Queue"),
                            "environments": _list_of("Environment")}),
})

_FILTER_PARAMETERS = [
    {"name": "repo", "in": "query", "schema": STR, "description": "owner/name"},
    {"name": "backend", "in": "query", "schema": STR, "description": "portable, xnnpack, qualcomm"},
    {"name": "target", "in": "query", "schema": STR, "description": "host, qnn-htp-sim, android-<soc>"},
    {"name": "category", "in": "query", "schema": STR, "description": "a failure category"},
    {"name": "days", "in": "query", "schema": {"type": "integer", "enum": list(WINDOWS)}},
    {"name": "page", "in": "query", "schema": {"type": "integer", "minimum": 1}},
]


def _get(summary: str, schema: str, *, filters=True, params=(), missing=False) -> dict:
    responses = {"200": {"description": summary, "content": {"application/json": {"schema": _ref(schema)}}}}
    if filters:
        responses["400"] = {"description": "a filter is invalid",
                            "content": {"application/json": {"schema": _ref("Error")}}}
    if missing:
        responses["404"] = {"description": "not found, or not readable by this viewer",
                            "content": {"application/json": {"schema": _ref("Error")}}}
    path_params = [{"name": p, "in": "path", "required": True,
                    "schema": INT if p in ("number", "run_id") else STR} for p in params]
    return {"get": {"summary": summary, "parameters": path_params + (_FILTER_PARAMETERS if filters else []),
                    "responses": responses}}


OPENAPI = {
    "openapi": "3.1.0",
    "info": {"title": "etriage dashboard API", "version": "1",
             "description": "Read-only history of etriage's triage runs: the dashboard's pages as JSON. "
                            "Private repositories need a GitHub login (session cookie from /login)."},
    "paths": {
        "/api/overview": _get("Health per backend x target, PRs with new failures, trunk failures, busiest clusters", "Overview"),
        "/api/prs": _get("Pull requests with their latest run's verdict counts", "PrList"),
        "/api/prs/{owner}/{name}/{number}": _get("One pull request: its comment, failures and every push", "PrPage",
                                                 filters=False, params=("owner", "name", "number"), missing=True),
        "/api/clusters": _get("Failure clusters", "ClusterList"),
        "/api/clusters/{cluster_id}": _get("One cluster: occurrences, primary lines, PRs and jobs", "ClusterPage",
                                           params=("cluster_id",), missing=True),
        "/api/flaky": _get("Flaky tests per test x target, ranked by the Wilson lower bound", "FlakyList"),
        "/api/runs/{run_id}": _get("One run: plan, build, results per suite and target, failures, log", "RunPage",
                                   filters=False, params=("run_id",), missing=True),
        "/api/devices": _get("Devices, each Celery queue's depth and oldest task age, and the commit environments being built", "DevicesPage", filters=False),
    },
    "components": {"schemas": SCHEMAS},
}
