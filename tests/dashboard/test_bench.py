"""bench/dashboard.py --quick runs end to end (seeding, every page, re-clustering, the worst
case of clustering) and reports every number; the times themselves are not asserted."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quick_benchmark_reports_every_page_and_clustering(capsys):
    spec = importlib.util.spec_from_file_location("bench_dashboard", ROOT / "bench" / "dashboard.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--quick", "--json", "--databases", "sqlite"]) == 0
    report = json.loads(capsys.readouterr().out)
    [sqlite] = report["databases"]
    assert sqlite["seed"]["runs"] == 500 and sqlite["seed"]["results"] > 9000
    pages = {p["page"] for p in sqlite["pages"]}
    assert {"overview", "prs", "pr", "clusters", "cluster", "flaky", "run", "devices", "metrics"} <= pages
    assert all(p["p99_ms"] >= p["p50_ms"] > 0 for p in sqlite["pages"])
    assert sqlite["recluster"]["clusters"] == sqlite["seed"]["clusters"]  # re-clustering keeps the clusters
    clustering = report["clustering"]
    assert clustering["failures"] == 1000 and 0 < clustering["clusters"] <= 1000
