"""The JSON API: its OpenAPI document is valid, every answer validates against it, and it shows
what the pages show (the same queries), on SQLite and PostgreSQL."""
from __future__ import annotations

import re

import jsonschema
import pytest
from openapi_spec_validator import validate

from tests.dashboard.conftest import make_app

ENDPOINTS = {  # path -> the schema its 200 answer must match
    "/api/overview": "Overview", "/api/trunk": "Trunk", "/api/prs": "PrList", "/api/clusters": "ClusterList",
    "/api/flaky?days=90": "FlakyList", "/api/devices": "DevicesPage"}


@pytest.fixture
def api(seeded, redis_url):
    return make_app(seeded, redis_url).test_client()


def check(client, url: str, schema: str):
    answer = client.get(url)
    assert answer.status_code == 200, answer.data[:300]
    document = client.get("/api/openapi.json").get_json()
    jsonschema.validate(answer.get_json(), {"$ref": f"#/components/schemas/{schema}", **document},
                        cls=jsonschema.Draft202012Validator)
    return answer.get_json()


def test_the_openapi_document_is_valid(client):
    document = client.get("/api/openapi.json").get_json()
    validate(document)
    assert set(document["paths"]) >= {"/api/overview", "/api/trunk", "/api/tests/{test}", "/api/prs", "/api/clusters", "/api/flaky",
                                      "/api/runs/{run_id}", "/api/devices"}


@pytest.mark.parametrize("url", list(ENDPOINTS))
def test_list_answers_match_the_document(api, url):
    data = check(api, url, ENDPOINTS[url])
    if "items" in data:
        assert data["items"], f"{url}: the seeded database should give rows"


def test_detail_answers_match_the_document(api):
    prs = check(api, "/api/prs", "PrList")["items"]
    first = prs[0]
    pr = check(api, f"/api/prs/{first['repo']}/{first['pr']}", "PrPage")
    assert pr["latest_run"] in [p["id"] for p in pr["pushes"]]
    run = check(api, f"/api/runs/{first['latest_run']}", "RunPage")
    assert run["run"]["repo"] == first["repo"]
    cluster_id = check(api, "/api/clusters", "ClusterList")["items"][0]["id"]
    cluster = check(api, f"/api/clusters/{cluster_id}", "ClusterPage")
    assert cluster["occurrences"] and cluster["cluster"]["id"] == cluster_id
    failing = check(api, "/api/trunk", "Trunk")["failing"][0]
    test = check(api, f"/api/tests/{failing['test']}", "TestPage")
    assert test["test"] == failing["test"] and failing["target"] in [t["target"] for t in test["targets"]]
    assert failing["cluster_id"] in [c["id"] for c in test["clusters"]]


def test_the_trunk_grid_mirrors_the_page(api):
    data = api.get("/api/trunk").get_json()
    html = api.get("/dashboard/").get_data(as_text=True)
    states = re.findall(r'<td class="cell s-(\w+)"', html)
    assert states == [cell["state"] for row in data["commits"] for cell in row["cells"]]


def test_the_api_mirrors_the_pages(api):
    data = api.get("/api/clusters?days=90").get_json()
    html = api.get("/dashboard/clusters?days=90").get_data(as_text=True)
    assert re.findall(r'href="/dashboard/clusters/(c[0-9a-f]+)"', html) == [c["id"] for c in data["items"]]
    prs = api.get("/api/prs?page=2").get_json()
    html = api.get("/dashboard/prs?page=2").get_data(as_text=True)
    assert re.findall(r'class="pr" href="/dashboard/pr/([^"]+)"', html) == [f"{p['repo']}/{p['pr']}" for p in prs["items"]]


@pytest.mark.parametrize("url, status", [("/api/prs?days=2", 400), ("/api/runs/99999999", 404),
                                         ("/api/runs/12345678901234567890", 404),  # past any integer column
                                         ("/api/runs/2147483648", 404), ("/api/prs/o/r/99999999999999999999", 404),
                                         ("/api/clusters/cnothere", 404), ("/api/flaky?page=-1", 400),
                                         ("/api/trunk?target=qnn-sim", 400), ("/api/tests/no/such.py::test", 404),
                                         ("/api/tests/x.py::t?backend=qnn", 400)])
def test_errors_are_json(api, url, status):
    answer = api.get(url)
    assert answer.status_code == status
    assert answer.get_json()["status"] == "error" and answer.get_json()["detail"]
