"""The failure record: what the engine makes from a log and every later stage reads.

Small, typed and serialisable. `to_dict()` gives the JSON interface that
`etriage classify --format json`, the pipeline's report and the service all share.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

# The category ids are an interface (labels, dashboards and reports key on them).
CATEGORIES: tuple[str, ...] = (
    "multi_method_lowering",
    "mutable_buffer",
    "qnn_sdk_or_toolchain",
    "qnn_op_validation",
    "device_infra",
    "ci_infra",
    "build_failure",
    "lint",
    "export_failure",
    "numerical_mismatch",
    "runtime_error",
    "import_or_env",
    "other",
)


@dataclass(frozen=True)
class Frame:
    """One traceback frame (Python) or source location (C/C++ diagnostics)."""

    file: str
    line: int
    function: str = ""


@dataclass
class Failure:
    """One failure found in a log, most informative line first."""

    line: str  # the primary line: the one line that best explains the failure
    line_no: int  # 1-based line number of `line` in the input
    test: str | None = None
    exception: str | None = None
    message: str = ""
    context: list[str] = field(default_factory=list)
    frames: list[Frame] = field(default_factory=list)
    fingerprint: str = ""
    category: str = "other"
    rule: str = ""
    title: str = ""
    explanation: str = ""
    suggestion: str = ""
    owners: list[str] = field(default_factory=list)
    # True when the rule says the environment (SDK, runner, device, runtime build), not the
    # change under test, is at fault. The pipeline turns this into the `environment` verdict.
    environment: bool = False
    # Other lines of the same incident (the extractor's evidence), for the model and readers.
    evidence: list[str] = field(default_factory=list)
    # How the category was decided: a rule's id, or "model" (the learned second opinion), and
    # how sure that is (0..1). `looks_like`: the nearest labelled corpus records, each
    # {"source", "category", "line", "similarity"}: similar failures seen in public history.
    decided_by: str = ""
    confidence: float = 0.0
    looks_like: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["frames"] = [asdict(f) for f in self.frames]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Failure":
        data = dict(data)
        data["frames"] = [Frame(**f) for f in data.get("frames", [])]
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in known})
