"""Records the triage pipeline passes from stage to stage: small, typed, serialisable.

plan -> BuildResult -> SuiteResult (TestResult...) -> Verdict (Failure, Suspect...) -> Report;
CI logs: Verdict... -> CiReport. A record holds the engine's Failure whole (never copies of its
fields), and every record goes to JSON and back through the one serialiser,
`triage_rules.records.dump` / `load` (`to_dict()` / `from_dict()` below are those two): the JSON
report, the stored full reports, pending publishes and the merge-base cache.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from bot import md
from triage_rules.records import LABEL_CONFIDENCE, Failure, dump, load

VERDICTS: tuple[str, ...] = ("new", "pre_existing", "flaky", "environment", "not_in_log", "fixed")


class _Record:
    def to_dict(self) -> dict:
        return dump(self)

    @classmethod
    def from_dict(cls, data: dict):
        return load(cls, data)


@dataclass
class ChangedFile(_Record):
    path: str
    status: str  # git's letter: A, M, D, R, C, T
    old_path: str | None = None  # renames/copies
    binary: bool = False
    mode: str = ""  # at head (git's: 100644, 100755, 120000 a symlink, 160000 a gitlink; "" deleted)


@dataclass
class SelectedTest(_Record):
    path: str  # test file or pytest node id, relative to the package root
    reason: str
    estimated_seconds: float = 0.0
    module: str = ""  # the changed file this test is relevant to
    why: str = ""  # left out because: needs | excluded | files | budget | run_budget ("" when run)


@dataclass
class Plan(_Record):
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
    refused: str = ""  # why nothing of the change is touched (a path of its tree that cannot be a file name)


@dataclass
class CommitEnvironment(_Record):
    """What one commit runs on (tasks/environments/): its whole Python tree of the package,
    laid over that commit's compiled parts, with the torch it pins; and whether it is healthy."""
    commit: str
    status: str  # ok | failed: the environment could not be made (`reason` says what)
    python: str = ""
    root: str = ""  # on PYTHONPATH first: holds the laid `executorch`
    package_dir: str = ""
    pythonpath: list[str] = field(default_factory=list)  # after `root`: the pinned torch when fetched
    readable: list[str] = field(default_factory=list)  # what a sandboxed run reads besides the interpreter
    compiled: str = ""  # wheel | registry | built
    compiled_reason: str = ""
    compiled_dir: str = ""  # the package whose compiled parts serve
    native_key: str = ""  # the hash of the trees that feed the compiled parts
    release: str = ""  # the release whose compiled parts serve ("" when built)
    torch: str = ""  # the torch that runs
    torch_pin: str = ""  # what the commit pins ("" when it pins nothing)
    tree_key: str = ""
    written: int = 0  # files laid from the commit where the compiled package's differ
    removed: int = 0  # modules of the compiled package the commit does not have
    healthy: bool | None = None  # None: not checked
    health: str = ""  # what the check said
    reason: str = ""  # why it could not be made
    steps: dict[str, float] = field(default_factory=dict)  # seconds per step


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
    failures: list[Failure] = field(default_factory=list)  # what the engine found in a failed build's log
    reason: str = ""
    seconds: float = 0.0
    pythonpath: list[str] = field(default_factory=list)  # after overlay_dir (the environment's torch)
    readable: list[str] = field(default_factory=list)  # the environment's compiled parts, torch
    environment: CommitEnvironment | None = None  # how this commit's environment was made


@dataclass
class TestResult(_Record):
    suite: str
    test: str  # pytest node id relative to the package root, or the probe's id
    target: str
    outcome: str  # passed | failed | error | skipped
    message: str = ""
    text: str = ""  # failure text + captured stderr, trimmed
    seconds: float = 0.0
    cpu_seconds: float | None = None  # CPU time of its process and threads (pytest plugin), when measured

    @property
    def failed(self) -> bool:
        return self.outcome in ("failed", "error")


@dataclass
class SuiteResult(_Record):
    suite: str
    target: str
    commit: str
    status: str  # ran | not_run | crashed
    reason: str = ""
    tests: list[TestResult] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    log_excerpt: str = ""
    seconds: float = 0.0
    record_path: str = ""  # the pytest plugin's record (CPU seconds, lines per test) in the run's work dir



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
    """One failing (or fixed) test of a run, or one failure in a CI job's log (then `suite` is
    the CI job and `target` its runner), judged against the merge base by
    tasks.pipeline.compare. It holds the engine's Failure whole; `fixed` ones have none."""
    suite: str
    test: str
    target: str
    base: str  # outcome at the merge base, or "absent"
    head: str
    verdict: str  # one of VERDICTS, or "ignored"
    failure: Failure | None = None  # the failure that speaks for the test (compare.primary)
    suspects: list[Suspect] = field(default_factory=list)
    log_excerpt: str = ""
    reproduce: str = ""
    ignored_reason: str = ""  # `/etriage ignore ... --reason`: a new failure a maintainer set aside
    link: str = ""  # where the real error is to be read (a CI job's page), for `not_in_log`
    # The root cause it shares with other verdicts of the run (compare.assign_roots): the same
    # fingerprint, or the same exception and message shape. One root, one entry in the report.
    root: str = ""

    # What the renderers, the check run and the store key on, read from the Failure.
    @property
    def category(self) -> str:
        return self.failure.category if self.failure else "other"

    @property
    def unsure(self) -> bool:
        """The engine could not tell two categories apart: say both, label neither."""
        return bool(self.failure and self.failure.unsure)

    @property
    def labelled(self) -> bool:
        """Sure enough for its category to become a label on the PR (decide.LABEL_CONFIDENCE)."""
        return bool(self.failure) and not self.unsure and self.failure.confidence >= LABEL_CONFIDENCE

    @property
    def category_words(self) -> str:
        """`category`, or "`X` or `Y`, unsure": markdown, each name through bot.md.code."""
        if self.unsure:
            return " or ".join(md.code(c, 60) for c in self.failure.unsure) + ", unsure"
        return md.code(self.category, 60)

    @property
    def fingerprint(self) -> str:
        return self.failure.fingerprint if self.failure else ""

    @property
    def primary_line(self) -> str:
        return self.failure.line if self.failure else ""


@dataclass
class Report(_Record):
    base: str
    head: str
    merge_base: str
    plan: Plan
    build: BuildResult
    results: list[Verdict]  # one per failing-or-fixed test
    suites: list[SuiteResult]  # head runs, every test in them (not_run ones carry the reason)
    summary: dict[str, int]
    seconds: float = 0.0
    base_cached: bool = False  # no test had to run at the merge base (all known from cache)
    base_runs: list[BaseRun] = field(default_factory=list)
    base_environment: CommitEnvironment | None = None  # the merge base's (the head's: build.environment)


@dataclass
class CiReport(_Record):
    """The failed CI jobs of one head, classified from their logs and judged against the CI of
    `merge_base` (the PR's base sha when `merge_base_exact` is False: no clone to find it)."""
    head: str
    merge_base: str | None
    merge_base_exact: bool
    jobs: list[str]  # the failed jobs whose logs were read
    results: list[Verdict] = field(default_factory=list)
