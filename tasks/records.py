"""Records the triage pipeline passes from stage to stage: small, typed, serialisable.

plan -> BuildResult -> SuiteResult (TestResult...) -> Verdict (Suspect...) -> Report.
Every record round-trips through `to_dict()` / `from_dict()` (the JSON report, the base
result cache and later the Celery task payloads all use that shape).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

VERDICTS: tuple[str, ...] = ("new", "pre_existing", "flaky", "environment", "fixed")


class _Record:
    # field name -> record type, for fields holding a list of records (or one record)
    _nested: dict = {}

    def to_dict(self) -> dict:
        return asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, data: dict):
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        values = {k: v for k, v in data.items() if k in known}
        for name, record_type in cls._nested.items():
            if isinstance(values.get(name), list):
                values[name] = [record_type.from_dict(v) for v in values[name]]
            elif isinstance(values.get(name), dict):
                values[name] = record_type.from_dict(values[name])
        return cls(**values)


@dataclass
class ChangedFile(_Record):
    path: str
    status: str  # git's letter: A, M, D, R, C, T
    old_path: str | None = None  # renames/copies
    binary: bool = False


@dataclass
class SelectedTest(_Record):
    path: str  # test file or pytest node id, relative to the package root
    reason: str
    estimated_seconds: float = 0.0
    module: str = ""  # the changed file this test is relevant to
    why: str = ""  # left out because: needs | excluded | files | budget | run_budget ("" when run)


@dataclass
class Plan(_Record):
    _nested = {"changed_files": ChangedFile, "selected": SelectedTest, "left_out": SelectedTest}
    base: str
    head: str
    merge_base: str
    changed_files: list[ChangedFile]
    areas: list[str]
    backends: list[str]
    suites: list[str]
    targets: list[str]
    recipes: list[str]  # build recipe names, in order
    docs_only: bool = False
    notes: list[str] = field(default_factory=list)
    selected: list[SelectedTest] = field(default_factory=list)
    left_out: list[SelectedTest] = field(default_factory=list)
    budget_seconds: float = 0.0  # the selected tests' time budget this run had


@dataclass
class BuildResult(_Record):
    status: str  # ok | failed | skipped
    kind: str  # none | overlay | cmake | overlay+cmake
    commit: str
    overlay_dir: str | None = None  # the directory to put on PYTHONPATH
    package_dir: str | None = None  # <overlay>/executorch: the tests' working directory
    build_dirs: dict[str, str] = field(default_factory=dict)  # recipe -> build output
    cache_hits: list[str] = field(default_factory=list)
    log_excerpt: str = ""
    failures: list[dict] = field(default_factory=list)  # Failure.to_dict() of a failed build
    reason: str = ""
    seconds: float = 0.0


@dataclass
class TestResult(_Record):
    suite: str
    test: str  # pytest node id relative to the package root, or the probe's id
    target: str
    outcome: str  # passed | failed | error | skipped
    message: str = ""
    text: str = ""  # failure text + captured stderr, trimmed
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return self.outcome in ("failed", "error")


@dataclass
class SuiteResult(_Record):
    _nested = {"tests": TestResult}
    suite: str
    target: str
    commit: str
    status: str  # ran | not_run | crashed
    reason: str = ""
    tests: list[TestResult] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    log_excerpt: str = ""
    seconds: float = 0.0



@dataclass
class BaseRun(_Record):
    """How one suite's merge-base outcomes were obtained (the report says it per suite)."""
    suite: str
    target: str
    source: str  # cache | ran | cache+ran | not_needed
    complete: bool  # every test of the suite is known at the merge base (`fixed` is computed)
    ran: list[str] = field(default_factory=list)  # tests run at the merge base by this triage
    needed: int = 0  # head failures that needed a merge-base outcome


@dataclass
class Suspect(_Record):
    path: str
    symbol: str
    score: float
    reason: str = ""
    line: int | None = None  # 1-based line at head: the first changed line of the symbol's hunk


@dataclass
class Verdict(_Record):
    _nested = {"suspects": Suspect}
    suite: str
    test: str
    target: str
    base: str  # outcome at the merge base, or "absent"
    head: str
    verdict: str  # one of VERDICTS
    category: str = "other"
    rule: str = ""
    primary_line: str = ""
    fingerprint: str = ""
    title: str = ""
    explanation: str = ""
    suggestion: str = ""
    suspects: list[Suspect] = field(default_factory=list)
    log_excerpt: str = ""
    reproduce: str = ""
    decided_by: str = ""  # the engine's: a rule id, "model" or "test-area"
    confidence: float = 0.0
    looks_like: list[dict] = field(default_factory=list)  # nearest labelled public failures
    ignored_reason: str = ""  # `/etriage ignore ... --reason`: a new failure a maintainer set aside


@dataclass
class Report(_Record):
    _nested = {"plan": Plan, "build": BuildResult, "results": Verdict, "suites": SuiteResult,
               "base_runs": BaseRun}
    base: str
    head: str
    merge_base: str
    plan: Plan
    build: BuildResult
    results: list[Verdict]  # one per failing-or-fixed test
    suites: list[SuiteResult]  # head runs (not_run ones carry the reason)
    summary: dict[str, int]
    seconds: float = 0.0
    base_cached: bool = False  # no test had to run at the merge base (all known from cache)
    base_runs: list[BaseRun] = field(default_factory=list)

    def to_dict(self) -> dict:
        data = asdict(self)
        # The report keeps per-test detail in `results`; the suites say what ran.
        data["suites"] = [
            {k: v for k, v in s.items() if k != "tests"} | {"tests": len(s["tests"])}
            for s in data["suites"]
        ]
        return data
