"""A seeded dashboard database: realistic runs, results, failures, clusters, flaky tests and
devices, the same for the same seed. It backs the dashboard's tests, bench/dashboard.py and
`etriage dashboard --demo`.

The failures are real: primary lines and log excerpts of the engine's labelled corpus
(tests/engine/corpus: 684 public CI failures with their category) and of the CI log fixtures
(../shared/fixtures/logs, or the copy shipped in etriage/dev/fixtures). Only their numbers are
varied (the normaliser erases them, so they cluster like reruns of one failure do), and a few
get a word changed (near-duplicates that the edit distance joins).
"""
from __future__ import annotations

import argparse
import random
import re
import zlib
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from bot.history import BulkLoad, History, backend_of, rebuild_stats
from bot.store import Store
from triage_rules import corpus
from triage_rules.cluster import cluster_text
from triage_rules.fingerprint import fingerprint

PUBLIC, PRIVATE = "pytorch/executorch", "qualcomm/executorch-qnn-internal"
HOSTILE_TITLE = '<script>alert("pwned")</script> [QNN] multi-method: share the KV cache & <b>bold</b>'
TARGETS = ("host", "qnn-htp-sim", "android-sm8650", "android-sm8750")
ENVIRONMENT = {"device_infra", "ci_infra", "qnn_sdk_or_toolchain", "import_or_env"}
TRIGGERS = ("pull_request", "pull_request", "pull_request", "rerun", "comment:run", "workflow_run")
SUITE_TESTS = {
    "multi_method": ["exir/backend/test/test_to_backend_multi_method.py::TestToBackendMultiMethod::test_"
                     + n for n in ("multi_method_to_backend_single_method", "multi_method_to_backend_two_methods",
                                   "multi_method_end_to_end", "multi_method_to_backend_sequential_delegates",
                                   "multi_method_to_backend_not_found", "multi_method_to_backend_partitioner_dict",
                                   "multi_method_to_backend_nested_delegates")],
    "mutable_buffer": ["backends/transforms/test/test_create_mutable_buffer.py::TestCreateMutableBuffer::test_"
                       + n for n in ("create_mutable_buffer", "mutable_buffer_kv_cache", "index_copy_kv_cache",
                                     "pt2e_quantized_kv_cache", "constant_prop_keeps_mutation")],
    "index_put": [f"backends/test/suite/operators/test_index_put.py::test_index_put_{flow}_{dtype}_{case}"
                  for flow in ("portable", "xnnpack") for dtype in ("float32", "float16")
                  for case in ("basic", "accumulate", "broadcast", "negative_index", "two_dims")],
    "probes": [f"probes::{n}" for n in ("multi_method::per_method_partitioners", "multi_method::two_backends",
                                        "multi_method::shared_getitem_indices", "multi_method::kv_prefill_decode",
                                        "mutable_buffer::index_put_fp", "mutable_buffer::index_copy_pt2e",
                                        "mutable_buffer::read_before_write")],
    "qnn": [f"backends/qualcomm/tests/test_qnn_delegate.py::TestQNN{kind}Operator::test_qnn_backend_{op}"
            for kind in ("FloatingPoint", "Quantized")
            for op in ("conv2d", "linear", "index_put", "layer_norm", "softmax", "matmul", "rms_norm",
                       "embedding", "slice_copy", "cat", "sdpa", "rope", "kv_cache_update")],
}
SUITES_OF_TARGET = {"host": ("multi_method", "mutable_buffer", "index_put", "probes"),
                    "qnn-htp-sim": ("qnn", "multi_method", "mutable_buffer"),
                    "android-sm8650": ("qnn",), "android-sm8750": ("qnn",)}
TITLES = ["[QNN] lower prefill and decode as two methods", "Fix constant propagation of mutated buffers",
          "[XNNPACK] partitioner: skip index_put with accumulate", "exir: memory planning for shared caches",
          "[QNN] HTP v79 support", "Bump pytorch pin", "to_backend: per-method partitioner map",
          "[QNN] rms_norm op builder", "llama: quantized KV cache (pt2e)", "docs: multi-method export",
          "emit: mutable buffer write-back", "[QNN] fix slice_copy validation", HOSTILE_TITLE]
AUTHORS = ["cccclai", "haowhsu-quic", "shewu-quic", "larryliu0820", "JacobSzwejbka", "mcr229", "kimishpatel",
           "outside-contributor"]


@dataclass
class Incident:
    """One real failure that recurs: its corpus record, where it strikes, and how."""
    line: str
    excerpt: str
    category: str
    kind: str  # trunk (broken on the default branch for a while) | new (a PR's own) | flaky
    tests: list[tuple[str, str, str]]  # (suite, test, target)
    start: datetime
    end: datetime
    rate: float


def real_failures(shared: Path | None = None) -> list[tuple[str, str, str]]:
    """(primary line, excerpt, category) of the labelled corpus and the CI log fixtures."""
    found = []
    for path in (corpus.TRAIN_FILE, corpus.EVAL_FILE):
        if path.is_file():
            found += [(r.failure_line, r.excerpt, r.category) for r in corpus.load_corpus(path)]
    logs = [shared / "fixtures" / "logs" / "pytorch-log-classifier"] if shared else []
    logs.append(Path(__file__).resolve().parent / "dev" / "fixtures" / "logs" / "pytorch-log-classifier")
    for folder in logs:
        if folder.is_dir():
            for log in sorted(folder.glob("*.txt")):
                lines = log.read_text(errors="replace").splitlines()
                primary = next((ln for ln in reversed(lines) if re.search(r"Error|FAILED|error:", ln)),
                               lines[-1] if lines else log.stem)
                found.append((primary.strip()[:400], "\n".join(lines[-60:]), "ci_infra"
                              if "runner" in log.stem or "artifact" in log.stem else "runtime_error"))
            break
    if not found:
        raise RuntimeError("no real failures to seed from: the corpus and the log fixtures are missing")
    return found


def _vary(line: str, rng: random.Random, edit: bool) -> str:
    """The line as another run prints it: free-standing numbers redrawn with as many digits
    (timestamps, ids, counts), and with `edit` one letter dropped (a near-duplicate)."""
    line = re.sub(r"(?<![A-Za-z_])\d+(?![A-Za-z_])",
                  lambda m: "".join(rng.choice("0123456789") for _ in m.group(0)), line)
    if edit and len(line) > 40:
        letters = [i for i, ch in enumerate(line) if ch.isalpha()]
        if letters:
            i = rng.choice(letters)
            line = line[:i] + line[i + 1:]
    return line


def _all_tests() -> list[tuple[str, str, str]]:
    return [(suite, test, target) for target, suites in SUITES_OF_TARGET.items()
            for suite in suites for test in SUITE_TESTS[suite]]


def seed(history: History, *, runs: int = 300, results: int = 6000, days: int = 30, seed: int = 12,
         now: datetime | None = None, shared: Path | None = None, devices: int = 6) -> dict:
    """Fill `history` with `runs` finished runs and about `results` results over `days` days."""
    rng = random.Random(seed)
    now = now or datetime.now(timezone.utc).replace(microsecond=0)
    span = timedelta(days=days)
    pool = real_failures(shared)
    rng.shuffle(pool)
    tests = _all_tests()
    incidents = []
    for i, (line, excerpt, category) in enumerate(pool[:max(12, min(len(pool), runs // 8, 60))]):
        kind = ("trunk", "new", "new", "flaky")[i % 4]
        start = now - span + timedelta(seconds=rng.uniform(0, span.total_seconds() * 0.9))
        length = timedelta(days=rng.uniform(1, 10)) if kind != "flaky" else span
        incidents.append(Incident(line, excerpt, category, kind, rng.sample(tests, rng.randint(1, 4)),
                                  start, min(now, start + length),
                                  {"trunk": 0.9, "new": 0.8, "flaky": 0.15}[kind]))
    striking = {}  # (suite, test, target) -> the incidents that can strike it
    for incident in incidents:
        for key in incident.tests:
            striking.setdefault(key, []).append(incident)
    prs = [(PRIVATE if n % 10 == 7 else PUBLIC, 9000 + n) for n in range(max(4, runs // 3))]
    pr_meta = {pr: (TITLES[i % len(TITLES)], AUTHORS[i % len(AUTHORS)]) for i, pr in enumerate(prs)}
    per_run = max(1, results // max(1, runs))
    run_rows, result_rows, failure_rows = [], [], []
    for n in range(runs):
        trunk = rng.random() < 0.15
        repo, pr = (PUBLIC, 0) if trunk else prs[min(len(prs) - 1, int(rng.random() ** 1.5 * len(prs)))]
        age = timedelta(seconds=(rng.random() ** 1.3) * span.total_seconds())
        started = now - age
        head = f"{rng.getrandbits(160):040x}"
        status = "completed"
        if n % 97 == 5:
            status = "abandoned"
        elif n % 131 == 9:
            status = "failed"
        elif age < timedelta(hours=1) and n % 7 == 0:
            status = "running"
        target = rng.choice(TARGETS if rng.random() < 0.4 else ("host", "qnn-htp-sim"))
        suites = SUITES_OF_TARGET[target]
        chosen = [(s, t, target) for s in suites for t in SUITE_TESTS[s]]
        chosen = rng.sample(chosen, min(len(chosen), per_run)) if len(chosen) >= per_run else \
            [chosen[i % len(chosen)][:2] + (target,) for i in range(len(chosen))]
        title, author = pr_meta.get((repo, pr), ("trunk: " + head[:7], "pytorchbot"))
        counts: dict[str, int] = {}
        results_here, failures_here, log_lines = [], [], []
        for suite, test, tgt in chosen if status != "abandoned" else []:
            outcome, verdict, hit = "passed", None, None
            for incident in striking.get((suite, test, tgt), ()):
                if (suite, test, tgt) in incident.tests and incident.start <= started <= incident.end \
                        and (incident.kind != "new" or (pr and zlib.crc32(f"{repo}#{pr}:{incident.line}".encode()) % 3 == 0)) \
                        and rng.random() < incident.rate:
                    hit = incident
                    break
            if hit:
                verdict = ("environment" if hit.category in ENVIRONMENT else
                           {"trunk": "pre_existing", "new": "new" if pr else "pre_existing",
                            "flaky": "flaky"}[hit.kind])
                outcome = "flaky" if verdict == "flaky" else "failed"
                counts[verdict] = counts.get(verdict, 0) + 1
                line = _vary(hit.line, rng, edit=rng.random() < 0.1)
                failures_here.append(dict(
                    repo=repo, pr=pr, sha=head, source=f"etriage:{suite}@{tgt}", test=test, target=tgt,
                    backend=backend_of(suite, tgt, test), verdict=verdict, category=hit.category,
                    rule=rng.choice(("model", f"{hit.category}.rule", "probe-failure")),
                    confidence=round(rng.uniform(0.55, 1.0), 2), fingerprint=fingerprint(line),
                    primary_line=line, line_no=None, text=cluster_text(line),
                    suspects=[{"path": "exir/passes/constant_prop_pass.py", "symbol": "constant_prop_pass",
                               "line": rng.randint(20, 400), "score": 3.0, "reason": "in the traceback"}]
                    if verdict == "new" else [], at=started + timedelta(minutes=5)))
                excerpt = hit.excerpt.splitlines()[-12:]
                excerpt = [line if x.strip() == hit.line.strip() else x for x in excerpt]
                log_lines += [f"=== {test} ({tgt}) ===", *excerpt, *([] if line in excerpt else [line])]
            results_here.append(dict(repo=repo, sha=head, suite=suite, test=test, target=tgt,
                                     backend=backend_of(suite, tgt, test), outcome=outcome,
                                     retries=1 if outcome == "flaky" else 0,
                                     duration=round(rng.uniform(0.2, 30.0), 2), at=started + timedelta(minutes=5)))
        build, ran = round(rng.uniform(2, 90), 1), round(rng.uniform(10, 400), 1)
        other = round(rng.uniform(3, 40), 1)
        primary = next((f["primary_line"] for f in failures_here), "")
        log = "\n".join(["$ etriage triage --target " + target, *log_lines, "triage finished"])
        run_rows.append(dict(
            key=f"{repo}#{pr}@{head}:pr:1", repo=repo, pr=pr, head_sha=head,
            base_sha=f"{rng.getrandbits(160):040x}", trigger="push" if trunk else rng.choice(TRIGGERS),
            kind="pr", title=title, author=author, status=status,
            conclusion=None if status in ("running", "abandoned") else
            ("failure" if counts.get("new") else "neutral" if counts.get("environment") else "success"),
            attempt=1, retry_of=None, started_at=started,
            finished_at=None if status == "running" else started + timedelta(seconds=build + ran + other),
            deadline_at=started + timedelta(hours=2),
            stage_seconds={"plan": round(other / 3, 1), "build": build, "suites": ran,
                           "classify": round(other / 3, 1), "compare": round(other / 3, 1),
                           "total": round(build + ran + other, 1)},
            counts=counts, plan={"suites": list(suites), "targets": [target], "areas": ["exir"],
                                 "backends": sorted({r["backend"] for r in results_here}),
                                 "changed_files": [{"path": "exir/passes/constant_prop_pass.py", "status": "M"}]},
            build={"status": "ok", "kind": "overlay", "seconds": build},
            suites=[{"suite": s, "target": target, "status": "ran",
                     "tests": sum(r["suite"] == s for r in results_here)} for s in suites],
            comment=_comment(counts, failures_here), log=log,
            primary_line_no=log.splitlines().index(primary) if primary in log.splitlines() else None))
        result_rows.append(results_here)
        failure_rows.append(failures_here)
    order = sorted(range(len(run_rows)), key=lambda i: run_rows[i]["started_at"])  # ids in time order
    run_rows = [run_rows[i] for i in order]
    result_rows = [result_rows[i] for i in order]
    failure_rows = [failure_rows[i] for i in order]
    bulk = BulkLoad(history)
    with history.engine.begin() as conn:
        ids = bulk.runs(conn, run_rows)
        bulk.rows(conn, "test_results", [dict(r, run_id=i) for i, rs in zip(ids, result_rows) for r in rs])
        bulk.rows(conn, "failure_events", [dict(f, run_id=i) for i, fs in zip(ids, failure_rows) for f in fs])
    latest = {}  # (repo, pr) -> the newest head: the store's pull request rows (open or closed)
    for row in run_rows:
        if row["pr"]:
            latest[(row["repo"], row["pr"])] = row["head_sha"]
    for n, ((repo, pr), head) in enumerate(sorted(latest.items())):
        history.store.record_pull(repo, pr, head, base_ref="main", base_sha=head[::-1], installation_id=1,
                                  state="closed" if n % 9 == 4 else "open")
    clustered = history.recluster()
    rebuild_stats(history)
    for n in range(devices):
        target = ("android-sm8650", "android-sm8750")[n % 2]
        history.upsert_device(id=f"R5CT{n:04d}", name=f"Galaxy S2{4 + n % 2} #{n}", target=target,
                              soc=("SM8650", "SM8750")[n % 2], host=f"lab-{n // 3}",
                              status=("idle", "leased", "offline", "idle")[n % 4],
                              lease_holder="pytorch/executorch#9003" if n % 4 == 1 else None,
                              last_seen=now - timedelta(minutes=n * 7), details={"android": "15"})
    return {"runs": len(run_rows), "results": sum(map(len, result_rows)),
            "failures": clustered["failures"] and sum(map(len, failure_rows)), "clusters": clustered["clusters"]}


def _comment(counts: dict, failures: list[dict]) -> str:
    head = (f"## etriage: {counts.get('new', 0)} new failure(s) caused by this change, "
            f"{counts.get('pre_existing', 0)} pre-existing, {counts.get('flaky', 0)} flaky, "
            f"{counts.get('environment', 0)} environment")
    lines = [head, ""]
    for f in failures:
        lines.append(f"- **{f['verdict']}** `{f['test']}` ({f['target']}): `{f['primary_line'][:160]}` "
                     f"(`{f['category']}`)")
    return "\n".join(lines) + "\n"


def seeded_store(url: str, **kwargs) -> tuple[Store, dict]:
    """A Store at `url` with its history seeded (an empty database is expected)."""
    store = Store(url)
    return store, seed(History(store), **kwargs)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--database-url", required=True, help="sqlite:///path or postgresql+psycopg://...")
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--results", type=int, default=6000)
    parser.add_argument("--seed", type=int, default=12)


def run(args) -> int:
    _, counts = seeded_store(args.database_url, runs=args.runs, results=args.results, seed=args.seed)
    print(", ".join(f"{v} {k}" for k, v in counts.items()))
    return 0
