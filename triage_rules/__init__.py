"""The failure engine: log readers, failure extraction, fingerprints, rules.

Public API (imported by the pipeline and the service; keep it stable):

    classify_text(text, *, job_name=None, failed=False) -> list[Failure]
    classify_file(path, *, job_name=None, failed=False) -> list[Failure]   # streams; bounded memory
    (failed=True: the caller knows the job failed, so at least one failure comes back)
    CATEGORIES, Failure, Frame

Nothing here imports torch or executorch.
"""
from triage_rules.records import CATEGORIES, Failure, Frame

__all__ = ["CATEGORIES", "Failure", "Frame", "classify_text", "classify_file"]


def classify_text(text: str, *, job_name: str | None = None, failed: bool = False) -> list[Failure]:
    from triage_rules.engine import classify_text as _impl  # deferred: the package's import stays light

    return _impl(text, job_name=job_name, failed=failed)


def classify_file(path, *, job_name: str | None = None, failed: bool = False) -> list[Failure]:
    from triage_rules.engine import classify_file as _impl  # deferred: the package's import stays light

    return _impl(path, job_name=job_name, failed=failed)
