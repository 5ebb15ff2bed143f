"""Dashboard speed: page loads on a seeded database, and re-clustering.

    python bench/dashboard.py                  # 10,000 runs / 200,000 results, SQLite and PostgreSQL
    python bench/dashboard.py --quick          # 500 runs / 10,000 results (tests/dashboard/test_bench.py)

For each database: seed it (etriage/seed.py), then load every page and API answer `--repeat`
times through the real app in this process (routing, queries, templates, SVG; no network), and
print p50 / p99 per page against the goal (p99 < 300 ms). Then re-cluster: `History.recluster()`
over every recorded failure, and the worst case of the clustering itself, 10,000 failures that
each have their own fingerprint so every one goes through the n-gram prefilter and the edit
distance (goal < 10 s). Numbers are printed, never asserted: tests do not time things.
"""
from __future__ import annotations

import argparse
import json
import random
import socket
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bot.app import create_app  # noqa: E402
from bot.dashboard import DashboardConfig  # noqa: E402
from bot.history import History  # noqa: E402
from bot.store import Store  # noqa: E402
from etriage.embedded_redis import EmbeddedRedis  # noqa: E402
from etriage.seed import PUBLIC, real_failures, seed  # noqa: E402
from triage_rules.cluster import Group, cluster_groups, cluster_text  # noqa: E402

PAGE_GOAL_MS, CLUSTER_GOAL_S = 300, 10.0
POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def pages(client) -> dict[str, str]:
    """The URLs to time: each page, a deep page of each list, each detail page, the API."""
    prs = client.get("/api/prs").get_json()["items"]
    clusters = client.get("/api/clusters").get_json()["items"]
    pr = next(p for p in prs if p["repo"] == PUBLIC)
    return {
        "overview": "/dashboard/", "prs": "/dashboard/prs", "prs page 5": "/dashboard/prs?page=5",
        "prs filtered": "/dashboard/prs?category=runtime_error&target=qnn-htp-sim",
        "pr": f"/dashboard/pr/{pr['repo']}/{pr['pr']}", "clusters": "/dashboard/clusters",
        "cluster": f"/dashboard/clusters/{clusters[0]['id']}", "flaky": "/dashboard/flaky",
        "run": f"/dashboard/runs/{pr['latest_run']}", "devices": "/dashboard/devices",
        "api overview": "/api/overview", "api prs": "/api/prs", "metrics": "/metrics",
        "test": "/dashboard/tests/" + client.get("/api/trunk").get_json()["failing"][0]["test"],
        "api trunk": "/api/trunk",
    }


def time_pages(client, repeat: int) -> list[tuple[str, float, float]]:
    out = []
    for name, url in pages(client).items():
        client.get(url)  # warm: the first load compiles templates and fills caches
        samples = []
        for _ in range(repeat):
            started = time.perf_counter()
            answer = client.get(url)
            samples.append((time.perf_counter() - started) * 1000)
            if answer.status_code != 200:
                raise SystemExit(f"{url}: {answer.status_code}")
        out.append((name, statistics.median(samples), percentile(samples, 0.99)))
    return out


def worst_case_clustering(count: int, seed_value: int = 5) -> tuple[float, int]:
    """`count` failures, each its own fingerprint: real lines with numbers redrawn and a word
    or two changed, so joining a cluster always takes the text path."""
    rng = random.Random(seed_value)
    lines = [line for line, _, _ in real_failures(ROOT.parent / "shared")]
    groups = []
    for i in range(count):
        words = rng.choice(lines).split()
        for _ in range(rng.randint(0, 2)):
            if words:
                words[rng.randrange(len(words))] = rng.choice(("alpha", "beta", "gamma", "delta"))
        groups.append(Group(f"fp{i:06d}", cluster_text(" ".join(words)), i))
    started = time.perf_counter()
    assignment = cluster_groups(groups)
    return time.perf_counter() - started, len(set(assignment.values()))


def analyse(history: History) -> None:
    """Planner statistics (and PostgreSQL's visibility map, for index-only scans), as
    autovacuum would have them on a database that grew over months rather than one bulk load."""
    with history.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        if history.engine.dialect.name == "postgresql":
            for table in history.t.values():
                conn.exec_driver_sql(f'VACUUM ANALYZE "{table.name}"')
        else:
            conn.exec_driver_sql("ANALYZE")


def bench_database(name: str, url: str, prefix: str, args, redis_url: str) -> dict:
    store = Store(url, prefix=prefix)
    history = History(store)
    try:
        started = time.perf_counter()
        counts = seed(history, runs=args.runs, results=args.results, shared=ROOT.parent / "shared")
        seeded = time.perf_counter() - started
        analyse(history)
        app = create_app({"webhook_secrets": ["bench"], "redis_url": redis_url},
                         redis_client=redis.Redis.from_url(redis_url), dashboard_config=DashboardConfig())
        app.extensions["etriage-dashboard"].use(history)
        timings = time_pages(app.test_client(), args.repeat)
        started = time.perf_counter()
        reclustered = history.recluster()
        recluster_s = time.perf_counter() - started
        return {"database": name, "seed": counts, "seed_seconds": round(seeded, 1),
                "pages": [{"page": p, "p50_ms": round(a, 1), "p99_ms": round(b, 1)} for p, a, b in timings],
                "recluster": {"failures": counts["failures"],
                              "fingerprints": reclustered["failures"], "clusters": reclustered["clusters"],
                              "seconds": round(recluster_s, 2)}}
    finally:
        store.drop_all() if prefix else store.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="500 runs / 10,000 results, 5 loads a page")
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--results", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=40, help="loads per page")
    parser.add_argument("--cluster-failures", type=int, default=10_000)
    parser.add_argument("--databases", default="sqlite,postgresql")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.results, args.repeat, args.cluster_failures = 500, 10_000, 5, 1_000
    report = {"runs": args.runs, "results": args.results, "databases": []}
    with EmbeddedRedis() as redis_url, tempfile.TemporaryDirectory() as folder:
        for name in args.databases.split(","):
            if name == "sqlite":
                report["databases"].append(bench_database(name, f"sqlite:///{folder}/bench.db", "", args, redis_url))
            elif name == "postgresql":
                try:
                    socket.create_connection(("127.0.0.1", 5432), timeout=0.5).close()
                except OSError:
                    print("postgresql: skipped (nothing on 127.0.0.1:5432)", file=sys.stderr)
                    continue
                report["databases"].append(bench_database(name, POSTGRES, f"b{uuid.uuid4().hex[:8]}_", args, redis_url))
    seconds, clusters = worst_case_clustering(args.cluster_failures)
    report["clustering"] = {"failures": args.cluster_failures, "distinct_fingerprints": args.cluster_failures,
                            "clusters": clusters, "seconds": round(seconds, 2)}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for db in report["databases"]:
        seed_counts = db["seed"]
        print(f"\n{db['database']}: {seed_counts['runs']} runs, {seed_counts['results']} results, "
              f"{seed_counts['failures']} failures, {seed_counts['clusters']} clusters (seeded in {db['seed_seconds']} s)")
        print(f"  {'page':<16} {'p50 ms':>8} {'p99 ms':>8}")
        for p in db["pages"]:
            mark = "" if p["p99_ms"] < PAGE_GOAL_MS else f"  over the {PAGE_GOAL_MS} ms goal"
            print(f"  {p['page']:<16} {p['p50_ms']:>8.1f} {p['p99_ms']:>8.1f}{mark}")
        r = db["recluster"]
        print(f"  re-clustering every recorded failure ({r['failures']} failures, {r['fingerprints']} "
              f"fingerprints -> {r['clusters']} clusters): {r['seconds']} s")
    c = report["clustering"]
    print(f"\nclustering {c['failures']} failures with distinct fingerprints -> {c['clusters']} clusters: "
          f"{c['seconds']} s (goal < {CLUSTER_GOAL_S:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
