"""The read-only JSON API under /api/, mirroring the pages (the same queries), described by the
OpenAPI 3.1 document at /api/openapi.json. Errors are JSON {"status": "error", "detail": ...}."""
from __future__ import annotations

from flask import Blueprint, jsonify, request

from bot.dashboard.auth import viewer
from bot.dashboard.context import state
from bot.dashboard.queries import WINDOWS, FilterError, Filters, environments, queues
from triage_rules.records import CATEGORIES

blueprint = Blueprint("dashboard_api", __name__, url_prefix="/api")


def _error(status: int, detail: str):
    return jsonify({"status": "error", "detail": detail}), status


def _filters() -> Filters:
    return state().dashboard.choices(viewer()).check(Filters.from_args(request.args))


@blueprint.errorhandler(FilterError)
def _bad_filter(error: FilterError):
    answer = {"status": "error", "detail": str(error)}
    if error.valid is not None:
        answer.update(argument=error.name, valid=list(error.valid))
    return jsonify(answer), 400


@blueprint.get("/overview")
def overview():
    return jsonify(state().dashboard.overview(_filters(), viewer()))


@blueprint.get("/trunk")
def trunk():
    return jsonify(state().dashboard.trunk(_filters(), viewer()))


@blueprint.get("/tests/<path:test>")
def test(test: str):
    filters = _filters()
    data = state().dashboard.test(test, filters, viewer())
    return jsonify(data) if data else _error(404, f"no result of that test in the last {filters.days} days "
                                                  "that you may read")


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
    "Error": _object({"status": {"const": "error"}, "detail": STR,
                      "argument": STR, "valid": {"type": "array", "items": STR}}, required=["status", "detail"]),
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
    "TrunkCell": _object({"target": STR, "suite": STR,
                          "state": {"enum": ["red", "environment", "flaky", "green", "none"]},
                          "run_id": INT, "tests": INT, "not_passed": INT, "failure_id": _nullable("integer")},
                         required=["target", "suite", "state"]),
    "TrunkFailing": _object({"test": STR, "target": STR, "suite": STR, "run_id": INT,
                             "failure_id": _nullable("integer"), "verdict": _nullable("string"),
                             "category": _nullable("string"), "primary_line": _nullable("string"),
                             "cluster_id": _nullable("string"), "since_sha": STR, "since_at": TIME,
                             "since_run": INT, "since_exact": BOOL, "last_green_sha": _nullable("string"),
                             "commits_red": INT, "latest_sha": STR}),
    "Trunk": _object({
        "repo": _nullable("string"), "red": BOOL,
        "latest": {"type": ["object", "null"], "properties": {"sha": STR, "at": TIME, "run_id": INT}},
        "since": {"type": ["object", "null"], "properties": {"sha": STR, "at": TIME, "run_id": INT,
                                                             "exact": BOOL, "commits": INT}},
        "failing": _list_of("TrunkFailing"),
        "jobs": {"type": "array", "items": _object({"target": STR, "suite": STR})},
        "commits": {"type": "array", "items": _object({"sha": STR, "at": TIME, "run_id": INT,
                                                       "cells": _list_of("TrunkCell")})},
        "environment": INT, "flaky": INT}),
    "TestSide": _object({"runs": INT, "passed": INT, "failed": INT, "flaky": INT, "skipped": INT,
                         "last": _nullable("string"),
                         "strip": {"type": "array", "items": _object({
                             "run_id": INT, "outcome": STR, "at": TIME, "sha": _nullable("string"), "repo": STR,
                             "pr": INT, "verdict": _nullable("string"), "failure_id": _nullable("integer")})}}),
    "TestPage": _object({
        "test": STR, "repos": {"type": "array", "items": STR},
        "targets": {"type": "array", "items": _object({
            "target": STR, "soc": _nullable("string"), "trunk": _ref("TestSide"), "prs": _ref("TestSide"),
            "flaky_rate": _nullable("number"), "flaky_lower": _nullable("number")})},
        "clusters": {"type": "array", "items": _object({
            "id": STR, "title": _nullable("string"), "category": _nullable("string"), "failures": INT,
            "trunk": INT, "prs": INT, "verdicts": COUNTS, "first": TIME, "last": TIME})},
        "failures": {"type": "array", "items": _object({
            "id": INT, "run_id": INT, "repo": STR, "pr": INT, "sha": _nullable("string"), "target": STR,
            "verdict": STR, "category": _nullable("string"), "primary_line": _nullable("string"),
            "cluster_id": _nullable("string"), "at": TIME})},
        "failure_count": INT}),
    "Overview": _object({
        "filters": _ref("Filters"), "days": {"type": "array", "items": STR}, "trunk": _ref("Trunk"),
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
    {"name": "repo", "in": "query", "schema": STR, "description": "owner/name, one the history holds"},
    {"name": "backend", "in": "query", "schema": STR, "description": "one the history holds: portable, xnnpack, qualcomm"},
    {"name": "target", "in": "query", "schema": STR, "description": "one the history holds: host, qnn-htp-sim, android-<soc>"},
    {"name": "category", "in": "query", "schema": {"enum": list(CATEGORIES)}, "description": "a failure category"},
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
        "/api/trunk": _get("Trunk now (red since which commit, which tests on which targets) and the "
                           "commits x jobs grid", "Trunk"),
        "/api/tests/{test}": _get("One test across trunk, pull requests and targets: results, flakiness, "
                                  "clusters, failures", "TestPage", params=("test",), missing=True),
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
