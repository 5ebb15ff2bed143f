"""A seeded dashboard database: a coherent history of ExecuTorch's trunk and pull requests, the
same for the same seed. It backs the dashboard's tests, bench/dashboard.py and
`etriage dashboard --demo`.

What makes it coherent:
- **Time.** Trunk is a chain of commits in time order; each commit gets one run on every target
  a few minutes after it lands. A pull request is opened on the trunk commit of its day (its
  merge base), and its pushes follow each other; every run starts after its commit and every
  result and failure lies between the run's start and finish.
- **Places.** A failure strikes only tests of its own area: a QNN error (the text names QNN, the
  HTP or QAIRT, or the category is QNN's) strikes QNN tests on QNN targets, a multi-method lowering
  error the multi-method tests and probes, and so on. A pull request's title, its changed files,
  its tests and its own new failures are all of one area.
- **Stories.** A trunk break starts at one commit (`new` there, `pre_existing` after), lasts some
  commits and is fixed by a later one; the last one is still open (trunk is red now, since a
  known commit). PRs based on a broken commit that run the broken test see it pre-existing. A
  PR's own regression fails some of its pushes and is often fixed by its last. The environment
  (QNN SDK, device, runner) breaks a target for some hours; flaky tests fail and pass on retry.
- **Text.** Every failure is real text that belongs to ExecuTorch: the labelled corpus's records
  whose source is pytorch/executorch (issues, PRs and commits; tests/engine/corpus) and the bot's
  own probe failures on patched ExecuTorch (corpus/generated/), and, for runner trouble only,
  the infrastructure logs of PyTorch's CI, which ExecuTorch's jobs run on. Their numbers are
  redrawn like reruns print them; a few lose a letter (near-duplicates the edit distance joins).
"""
from __future__ import annotations

import argparse
import json
import random
import re
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class Area:
    """A part of ExecuTorch: the PRs that change it, the files they touch, where its tests run."""
    titles: tuple[str, ...]
    files: tuple[tuple[str, str], ...]  # (path, a function in it)
    targets: tuple[str, ...]


AREAS = {
    "qnn": Area(("[QNN] lower prefill and decode as two methods", "[QNN] HTP v79 support",
                 "[QNN] rms_norm op builder", "[QNN] fix slice_copy validation", "[QNN] quantized sdpa for llama",
                 HOSTILE_TITLE),
                (("backends/qualcomm/builders/op_rms_norm.py", "RmsNormVisitor.define_node"),
                 ("backends/qualcomm/partition/qnn_partitioner.py", "QnnPartitioner.partition"),
                 ("backends/qualcomm/utils/utils.py", "generate_qnn_executorch_compiler_spec")),
                ("qnn-htp-sim", "android-sm8650", "android-sm8750")),
    "multi_method": Area(("to_backend: per-method partitioner map", "exir: lower several methods in one program",
                          "llama: export prefill and decode as methods"),
                         (("exir/backend/backend_api.py", "to_backend"),
                          ("exir/program/_program.py", "EdgeProgramManager.to_backend")),
                         ("host", "qnn-htp-sim")),
    "mutable_buffer": Area(("Fix constant propagation of mutated buffers", "llama: quantized KV cache (pt2e)",
                            "emit: mutable buffer write-back", "exir: memory planning for shared caches"),
                           (("exir/passes/constant_prop_pass.py", "constant_prop_pass"),
                            ("exir/memory_planning.py", "_is_mutable_buffer"),
                            ("exir/emit/_emitter.py", "_emit_output")),
                           ("host", "qnn-htp-sim")),
    "xnnpack": Area(("[XNNPACK] partitioner: skip index_put with accumulate", "[XNNPACK] fp16 index_put"),
                    (("backends/xnnpack/partition/config/generic_node_configs.py", "IndexPutConfig.check_constraints"),),
                    ("host",)),
    "portable": Area(("kernels: index_put broadcasting", "portable: negative indices in index_put"),
                     (("kernels/portable/cpu/op_index_put.cpp", "index_put_out"),), ("host",)),
    "docs": Area(("docs: multi-method export", "Bump pytorch pin"), (("docs/source/using-executorch-export.md", ""),), ()),
}
AREA_OF_PROBE = {"multi_method": "multi_method", "mutable_buffer": "mutable_buffer"}
AUTHORS = ["cccclai", "haowhsu-quic", "shewu-quic", "larryliu0820", "JacobSzwejbka", "mcr229", "kimishpatel",
           "outside-contributor"]
# Where a failure belongs, by its text first (ordered: the first match wins), then by category.
# Other backends' failures (Arm, Core ML, Vulkan, MPS) have no tests here and are left out.
AREA_BY_TEXT = [(re.compile(p, re.I), a) for p, a in (
    (r"\b(arm|tosa|ethos|vela|coreml|mlstate|vulkan|shader|mps|mediatek|neuron|cadence|openvino)\b", None),
    (r"qnn|qualcomm|htp|qairt|hexagon|snpe", "qnn"), (r"xnn", "xnnpack"))]
AREA_BY_CATEGORY = {"qnn_op_validation": "qnn", "qnn_sdk_or_toolchain": "qnn", "multi_method_lowering": "multi_method",
                    "mutable_buffer": "mutable_buffer", "export_failure": "portable", "runtime_error": "portable",
                    "numerical_mismatch": "portable", "device_infra": "device", "ci_infra": "runner",
                    "import_or_env": "runner"}
FLAKY = frozenset({"runtime_error", "numerical_mismatch"})  # what a flaky test prints: a crash, a tolerance
NOT_A_TEST_FAILURE = {"build_failure", "lint", "other"}  # a build or lint job's, not a test's
INFRA_LOGS = ("gha_timeout", "docker_manifest_unknown", "artifact_not_found", "action_archive_download_failure",
              "infra_osdc_pod_failure", "gha_operation_canceled", "aws_credentials_load_failure")


@dataclass(frozen=True)
class RealFailure:
    line: str
    excerpt: str
    category: str
    area: str


def real_failures(shared: Path | None = None) -> list[tuple[str, str, str]]:
    """(primary line, excerpt, category) of every real failure the seed may use."""
    return [(f.line, f.excerpt, f.category) for f in _real_failures(shared)]


def area_of(line: str, excerpt: str, category: str) -> str | None:
    """Other backends' failures: none; QNN's text: QNN (a QNN multi-method failure is QNN's);
    then the domain categories; then XNNPACK's text; then the generic categories."""
    text = f"{line}\n{excerpt}"
    for pattern, area in AREA_BY_TEXT[:2]:
        if pattern.search(text):
            return area
    if category in ("multi_method_lowering", "mutable_buffer"):
        return AREA_BY_CATEGORY[category]
    if AREA_BY_TEXT[2][0].search(text):
        return "xnnpack"
    return AREA_BY_CATEGORY.get(category)


def _real_failures(shared: Path | None) -> list[RealFailure]:
    found = []
    # the generated records: the bot's own failures on patched ExecuTorch
    for path in (corpus.TRAIN_FILE, corpus.EVAL_FILE, *corpus.generated_files()):
        if path.is_file():
            for line in path.read_text().splitlines():
                record = json.loads(line)
                if "pytorch/executorch" not in record["source"]:
                    continue
                area = area_of(record["failure_line"], record["excerpt"], record["category"])
                if area is not None and record["category"] not in NOT_A_TEST_FAILURE:
                    found.append(RealFailure(record["failure_line"], record["excerpt"], record["category"], area))
    folders = [shared / "fixtures" / "logs" / "pytorch-log-classifier"] if shared else []
    folders.append(Path(__file__).resolve().parent / "dev" / "fixtures" / "logs" / "pytorch-log-classifier")
    for folder in folders:
        if folder.is_dir():
            for stem in INFRA_LOGS:
                log = folder / f"{stem}.txt"
                if log.is_file():
                    lines = log.read_text(errors="replace").splitlines()
                    primary = next((ln for ln in reversed(lines) if re.search(r"Error|error:|##\[error\]", ln)),
                                   lines[-1] if lines else stem)
                    found.append(RealFailure(primary.strip()[:400], "\n".join(lines[-40:]), "ci_infra", "runner"))
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


def _area_of_test(suite: str, test: str) -> str:
    if suite == "qnn":
        return "qnn"
    if suite == "probes":
        return AREA_OF_PROBE[test.split("::")[1]]
    if suite == "index_put":
        return "xnnpack" if "_xnnpack_" in test else "portable"
    return suite


def _tests_of(area: str, targets=TARGETS) -> list[tuple[str, str, str]]:
    """(suite, test, target) of an area's tests on these targets."""
    return [(suite, test, target) for target in targets for suite in SUITES_OF_TARGET[target]
            for test in SUITE_TESTS[suite] if _area_of_test(suite, test) == area]


@dataclass
class Strike:
    """A failure that strikes some (suite, test, target)s: on trunk commits [first, end), on a
    PR's pushes, or (environment, flaky) in a window of time, at a rate."""
    failure: RealFailure
    kind: str  # trunk | pr | environment | flaky
    tests: set
    rate: float = 1.0
    first: int = 0  # trunk: the commit that broke it
    end: int = 1 << 30  # trunk: the commit that fixed it
    start_at: datetime | None = None
    end_at: datetime | None = None


@dataclass
class Run:
    repo: str
    pr: int
    head: str
    base: str
    started: datetime
    targets: tuple[str, ...]
    tests: list = field(default_factory=list)  # (suite, test, target)
    title: str = ""
    author: str = ""
    trigger: str = "pull_request"
    status: str = "completed"
    area: str = ""
    commit: int | None = None  # trunk: index of the commit; a PR: index of its merge base
    own: Strike | None = None  # a PR's own regression at this push


def _sha(rng: random.Random) -> str:
    return f"{rng.getrandbits(160):040x}"


def seed(history: History, *, runs: int = 300, results: int = 6000, days: int = 30, seed: int = 12,
         now: datetime | None = None, shared: Path | None = None, devices: int = 6) -> dict:
    """Fill `history` with `runs` runs (about `results` results) over `days` days."""
    rng = random.Random(seed)
    now = now or datetime.now(timezone.utc).replace(microsecond=0)
    span = timedelta(days=days)
    pool = _real_failures(shared)
    by_area: dict[str, list[RealFailure]] = {}
    for failure in pool:
        by_area.setdefault(failure.area, []).append(failure)
    for failures in by_area.values():
        rng.shuffle(failures)

    def take(*areas: str, env: bool | None = None, categories: frozenset = frozenset()) -> RealFailure:
        """A failure of one of these areas (env: only environment categories, or none of them),
        of one of `categories` when the area has one."""
        choices = [f for a in areas for f in by_area.get(a, ())
                   if env is None or (f.category in ENVIRONMENT) == env]
        return rng.choice([f for f in choices if f.category in categories] or choices or pool)

    # ---- trunk: a chain of commits, one run on every target each -------------------------------
    full = sum(len(SUITE_TESTS[s]) for t in TARGETS for s in SUITES_OF_TARGET[t])
    n_commits = max(8, min(runs // 5, results // (2 * full)))
    step = span / n_commits
    commits = [(_sha(rng), now - span + step * (k + rng.uniform(0.05, 0.7))) for k in range(n_commits)]
    strikes: list[Strike] = []
    breakable = [a for a in ("qnn", "multi_method", "mutable_buffer", "xnnpack", "portable") if by_area.get(a)]
    n_breaks = max(3, n_commits // 6)
    for b in range(n_breaks):
        area = breakable[b % len(breakable)] if b < n_breaks - 1 else "qnn"  # the open one is QNN's
        if b == n_breaks - 1:  # still broken now: since 2 to 4 commits ago
            first, end = n_commits - rng.randint(2, min(4, n_commits - 1)), n_commits
        else:
            first = rng.randint(1, max(1, n_commits - 6))
            end = first + rng.randint(1, 4)
        candidates = _tests_of(area, ("android-sm8750",) if b == n_breaks - 1 else TARGETS)
        tests = set(rng.sample(candidates, min(len(candidates), rng.randint(1, 3))))
        strikes.append(Strike(take(area, env=False), "trunk", tests, first=first, end=end))
    env_windows = max(2, days // 6)
    for w in range(env_windows):
        target = TARGETS[1 + w % 3]  # the SDK on the simulator, the devices
        failure = take("qnn", env=True) if target == "qnn-htp-sim" else take("device", "runner", env=True)
        at = now - span + timedelta(seconds=rng.uniform(0, span.total_seconds() - 86400))
        strikes.append(Strike(failure, "environment", set(rng.sample(_tests_of("qnn", (target,)), 3)), rate=0.9,
                              start_at=at, end_at=at + timedelta(hours=rng.uniform(3, 14))))
    for area in ("qnn", "multi_method", "mutable_buffer", "qnn", "portable"):
        candidates = _tests_of(area)
        if candidates and by_area.get(area):
            strikes.append(Strike(take(area, env=False, categories=FLAKY), "flaky", {rng.choice(candidates)},
                                  rate=rng.uniform(0.04, 0.15), start_at=now - span, end_at=now))

    planned: list[Run] = []
    n_trunk = n_commits
    for k, (sha, at) in enumerate(commits):
        planned.append(Run(PUBLIC, 0, sha, commits[k - 1][0] if k else _sha(rng),
                           at + timedelta(minutes=rng.uniform(2, 20)), TARGETS,
                           [(s, t, tg) for tg in TARGETS for s in SUITES_OF_TARGET[tg] for t in SUITE_TESTS[s]],
                           title=f"trunk {sha[:7]}", author="pytorchbot", trigger="push", commit=k))

    # ---- pull requests: opened on a trunk commit, pushes in order ----------------------------
    pr_runs = max(0, runs - n_trunk)
    per_run = max(4, (results - n_trunk * full) // max(1, pr_runs))
    area_names = [a for a in AREAS if a == "docs" or by_area.get(a)]
    number, made = 9000, 0
    while made < pr_runs:
        area = area_names[number % len(area_names)] if number % 7 else "qnn"
        spec = AREAS[area]
        repo = PRIVATE if number % 10 == 7 else PUBLIC
        title = spec.titles[(number // len(area_names)) % len(spec.titles)]
        pushes = min(pr_runs - made, 1 + int(rng.expovariate(0.9)))
        first = commits[0][1] + timedelta(minutes=30)  # opened on a trunk commit the history holds
        opened = first + timedelta(seconds=rng.uniform(0, max(60.0, (now - first).total_seconds() - 3600)))
        base = max([k for k, (_, at) in enumerate(commits) if at <= opened] or [0])
        targets = spec.targets[:1] + ((rng.choice(spec.targets[1:]),) if len(spec.targets) > 1 else ())
        own = None
        if area != "docs" and number % 3 == 0:
            candidates = _tests_of(area, targets)
            own = Strike(take(area, env=False), "pr", set(rng.sample(candidates, min(len(candidates), rng.randint(1, 3)))),
                         rate=1.0)
        fixed_at = pushes - 1 if own and pushes > 1 and rng.random() < 0.6 else pushes
        at = opened
        for p in range(pushes):
            if at >= now - timedelta(minutes=5):
                break
            selected = _tests_of(area, targets) if area != "docs" else []
            selected = sorted(rng.sample(selected, min(len(selected), per_run)))
            if own and p < fixed_at:
                selected = sorted(set(selected) | own.tests)
            planned.append(Run(repo, number, _sha(rng), commits[base][0], at, targets, selected, title=title,
                               author=AUTHORS[number % len(AUTHORS)],
                               trigger="pull_request" if p == 0 else rng.choice(("pull_request", "rerun",
                                                                                  "comment:run")),
                               area=area, commit=base, own=own if p < fixed_at else None))
            made += 1
            at += timedelta(hours=rng.uniform(0.5, 30))
        number += 1
    planned.sort(key=lambda r: r.started)  # run ids in time order
    for n, run in enumerate(planned):
        if run.pr and n % 97 == 5:
            run.status = "abandoned"
        elif run.pr and n % 131 == 9:
            run.status = "failed"
        elif now - run.started < timedelta(hours=1) and n % 3 == 0:
            run.status = "running"
    return _write(history, planned, strikes, commits, rng, now, devices)


def _outcome(run: Run, key, strikes: list[Strike], rng: random.Random):
    """(the strike that failed this test here, its verdict), or (None, None) when it passed."""
    if run.own is not None and key in run.own.tests:
        return run.own, "new"
    for strike in strikes:
        if key not in strike.tests:
            continue
        if strike.kind == "trunk":
            commit = run.commit if run.commit is not None else -1
            if strike.first <= commit < strike.end:
                return strike, "new" if run.pr == 0 and commit == strike.first else "pre_existing"
        elif strike.start_at <= run.started <= strike.end_at and rng.random() < strike.rate:
            return strike, "environment" if strike.kind == "environment" else "flaky"
    return None, None


def _write(history: History, planned: list[Run], strikes, commits, rng: random.Random, now, devices) -> dict:
    run_rows, result_rows, failure_rows = [], [], []
    for run in planned:
        build, other = round(rng.uniform(2, 90), 1), round(rng.uniform(3, 40), 1)
        ran_seconds = 0.0
        counts: dict[str, int] = {}
        results_here, failures_here, log_lines = [], [], []
        for suite, test, target in run.tests if run.status != "abandoned" else []:
            duration = round(rng.uniform(0.2, 30.0), 2)
            ran_seconds += duration
            at = run.started + timedelta(seconds=build + ran_seconds)
            strike, verdict = _outcome(run, (suite, test, target), strikes, rng)
            outcome = "passed" if strike is None else "flaky" if verdict == "flaky" else "failed"
            if strike is not None:
                counts[verdict] = counts.get(verdict, 0) + 1
                line = _vary(strike.failure.line, rng, edit=rng.random() < 0.1)
                spec = AREAS.get(run.area)
                suspects = [{"path": path, "symbol": symbol, "line": rng.randint(20, 400), "score": 3.0,
                             "reason": "in the traceback"} for path, symbol in spec.files[:2]] \
                    if verdict == "new" and run.pr and spec else []
                failures_here.append(dict(
                    repo=run.repo, pr=run.pr, sha=run.head, source=f"etriage:{suite}@{target}", test=test,
                    target=target, backend=backend_of(suite, target, test), verdict=verdict,
                    category=strike.failure.category,
                    rule=("probe-failure" if suite == "probes" else rng.choice(("model", f"{strike.failure.category}.rule"))),
                    confidence=round(rng.uniform(0.6, 1.0), 2), fingerprint=fingerprint(line),
                    primary_line=line, line_no=None, text=cluster_text(line), suspects=suspects, at=at))
                excerpt = strike.failure.excerpt.splitlines()[-12:]
                excerpt = [line if x.strip() == strike.failure.line.strip() else x for x in excerpt]
                log_lines += [f"=== {test} ({target}) ===", *excerpt, *([] if line in excerpt else [line])]
            results_here.append(dict(repo=run.repo, sha=run.head, suite=suite, test=test, target=target,
                                     backend=backend_of(suite, target, test), outcome=outcome,
                                     retries=1 if outcome == "flaky" else 0, duration=duration, at=at))
        total = round(build + ran_seconds + other, 1)
        primary = next((f["primary_line"] for f in failures_here), "")
        log = "\n".join([f"$ etriage triage --head {run.head[:12]} --base {run.base[:12]} "
                         + " ".join(f"--target {t}" for t in run.targets),
                         f"ran {len(results_here)} test(s) on {', '.join(run.targets) or 'no target'}",
                         *log_lines, "triage finished"])
        spec = AREAS.get(run.area)
        suites = sorted({s for s, _, _ in run.tests})
        run_rows.append(dict(
            key=f"{run.repo}#{run.pr}@{run.head}:pr:1", repo=run.repo, pr=run.pr, head_sha=run.head,
            base_sha=run.base, trigger=run.trigger, kind="pr", title=run.title, author=run.author,
            status=run.status, conclusion=None if run.status in ("running", "abandoned") else
            ("failure" if counts.get("new") or (run.pr == 0 and counts.get("pre_existing"))
             else "neutral" if counts.get("environment") else "success"),
            attempt=1, retry_of=None, started_at=run.started,
            finished_at=None if run.status in ("running", "abandoned") else run.started + timedelta(seconds=total),
            deadline_at=run.started + timedelta(hours=2),
            stage_seconds={"plan": round(other / 3, 1), "build": build, "suites": round(ran_seconds, 1),
                           "classify": round(other / 3, 1), "compare": round(other / 3, 1), "total": total},
            counts=counts, plan={"suites": suites, "targets": list(run.targets),
                                 "areas": [run.area or "trunk"], "docs_only": run.area == "docs",
                                 "backends": sorted({r["backend"] for r in results_here}),
                                 "changed_files": [{"path": p, "status": "M"} for p, _ in spec.files] if spec else []},
            build={"status": "ok", "kind": "overlay", "seconds": build},
            suites=[{"suite": s, "target": t, "status": "ran",
                     "tests": sum(r["suite"] == s and r["target"] == t for r in results_here)}
                    for t in run.targets for s in SUITES_OF_TARGET[t] if s in suites],
            comment=_comment(counts, failures_here), log=log,
            primary_line_no=log.splitlines().index(primary) if primary in log.splitlines() else None))
        result_rows.append(results_here)
        failure_rows.append(failures_here)
    bulk = BulkLoad(history)
    with history.engine.begin() as conn:
        ids = bulk.runs(conn, run_rows)
        bulk.rows(conn, "test_results", [dict(r, run_id=i) for i, rs in zip(ids, result_rows) for r in rs])
        bulk.rows(conn, "failure_events", [dict(f, run_id=i) for i, fs in zip(ids, failure_rows) for f in fs])
        checks = history.store.t.get("runs")
        if checks is not None:  # the check run each PR head got (its id links to GitHub)
            conn.execute(checks.insert(), [dict(
                repo=r["repo"], pr=r["pr"], head_sha=r["head_sha"], kind="pr", status="completed",
                conclusion=r["conclusion"], check_run_id=1_900_000_000 + i,
                created_at=r["started_at"], updated_at=r["finished_at"] or r["started_at"])
                for i, r in zip(ids, run_rows)])
    latest = {}  # (repo, pr) -> the newest head: the store's pull request rows (open or closed)
    for row in run_rows:
        if row["pr"]:
            latest[(row["repo"], row["pr"])] = (row["head_sha"], row["base_sha"])
    for n, ((repo, pr), (head, base)) in enumerate(sorted(latest.items())):
        history.store.record_pull(repo, pr, head, base_ref="main", base_sha=base, installation_id=1,
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
            "failures": sum(map(len, failure_rows)), "clusters": clustered["clusters"],
            "trunk_commits": len(commits)}


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
