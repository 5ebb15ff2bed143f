"""What a probe returns, and the two ways a probe stops early.

The failure text is an interface: the failure engine and the pipeline key on the line
`ProbeFailure: [<category>] <diagnosis>` (and `ProbeEnvironment: <reason>` for skips),
so both are built here and nowhere else.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

SUITES: tuple[str, ...] = ("multi_method", "mutable_buffer", "qnn_multi_method", "qnn_mutable_buffer", "qnn_ops")
# What `--suite all` and `--suite qnn` run: the QNN probes need QNN_SDK_ROOT, which only the
# qnn-htp-sim target's runs are given (tasks/qnn/).
GROUPS: dict[str, tuple[str, ...]] = {"all": ("multi_method", "mutable_buffer"),
                                      "qnn": ("qnn_multi_method", "qnn_mutable_buffer", "qnn_ops")}
OUTCOMES: tuple[str, ...] = ("passed", "failed", "error", "skipped")
# suite -> the triage category its failures belong to (ids from triage_rules.records.CATEGORIES)
SUITE_CATEGORY: dict[str, str] = {
    "multi_method": "multi_method_lowering",
    "mutable_buffer": "mutable_buffer",
    "qnn_multi_method": "multi_method_lowering",
    "qnn_mutable_buffer": "mutable_buffer",
    "qnn_ops": "qnn_op_validation",
}


class ProbeFailure(Exception):
    """The change broke what the probe checks. `summary` is one line; `details` explain it."""

    def __init__(self, summary: str, details: list[str] | None = None, data: dict | None = None):
        super().__init__(summary)
        self.summary = " ".join(summary.split())
        self.details = list(details or [])
        self.data = dict(data or {})


class ProbeEnvironmentError(Exception):
    """The probe cannot run here (backend not registered, optional package absent)."""


def failure_line(category: str, summary: str) -> str:
    return f"ProbeFailure: [{category}] {' '.join(summary.split())}"


def environment_line(reason: str) -> str:
    return f"ProbeEnvironment: {' '.join(reason.split())}"


@dataclass
class ProbeResult:
    suite: str
    name: str
    outcome: str
    diagnosis: str = ""
    details: dict = field(default_factory=dict)
    duration: float = 0.0
    module: str = ""  # source file of the probe, relative to the repo (JUnit `file=`)

    @property
    def message(self) -> str:
        """The one line a reader (or a JUnit `message=`) should see first."""
        return self.diagnosis.splitlines()[0] if self.diagnosis else self.outcome

    def to_dict(self) -> dict:
        return asdict(self)
