"""Serialise a lowered program to .pte bytes and run it on the real ExecuTorch runtime.

Everything goes through the Python bindings (`executorch.extension.pybindings.portable_lib`)
of whatever `executorch` is first on sys.path, so an overlay of a PR's files is what runs.
"""
from __future__ import annotations

import importlib
from typing import Any, Sequence

from tasks.probes.records import ProbeEnvironmentError


def import_optional(module: str, *, may_be_absent: bool = False):
    """Import a module the probe needs; a package missing from this environment is a skip.

    Only a missing *third-party* package is the environment's fault: an ImportError raised
    from inside executorch (a PR breaking an import) propagates and becomes a probe error,
    unless `may_be_absent` says this executorch module is not shipped by every build.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing.startswith("executorch.") and not (may_be_absent and missing == module):
            raise
        raise ProbeEnvironmentError(f"{missing or module} is not installed here") from exc


def _bindings():
    return import_optional("executorch.extension.pybindings.portable_lib")


def registered_backends() -> list[str]:
    return list(_bindings()._get_registered_backend_names())


def require_backends(*names: str) -> None:
    available = registered_backends()
    missing = [n for n in names if n not in available]
    if missing:
        raise ProbeEnvironmentError(
            f"backend {', '.join(missing)} is not registered in this ExecuTorch runtime "
            f"(registered: {', '.join(available) or 'none'})"
        )


def to_pte(edge_manager, config=None) -> tuple[Any, bytes]:
    """EdgeProgramManager -> (ExecutorchProgramManager, .pte bytes)."""
    program = edge_manager.to_executorch(config) if config is not None else edge_manager.to_executorch()
    return program, program.buffer


class LoadedProgram:
    """A .pte loaded once; its methods keep their state (mutable buffers) between calls."""

    def __init__(self, pte: bytes):
        self._module = _bindings()._load_for_executorch_from_buffer(pte)

    def method_names(self) -> list[str]:
        return sorted(self._module.method_names())

    def run(self, method: str, inputs: Sequence[Any]) -> list[Any]:
        return list(self._module.run_method(method, tuple(inputs)))
