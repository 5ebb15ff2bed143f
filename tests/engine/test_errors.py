"""ExecuTorch error codes match the installed runtime header."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from triage_rules import errors


def _installed_header() -> Path | None:
    try:
        import importlib.util

        spec = importlib.util.find_spec("executorch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    header = Path(list(spec.submodule_search_locations)[0]) / "include/executorch/runtime/core/error.h"
    return header if header.exists() else None


def test_codes_match_installed_error_h():
    header = _installed_header()
    # executorch is a pinned dependency, so a missing header is a broken install, not a reason to skip.
    assert header is not None, "executorch's include/executorch/runtime/core/error.h is not installed"
    enum = header.read_text().split("enum class Error", 1)[1].split("};", 1)[0]
    declared = {int(code, 16): name for name, code in re.findall(r"^\s*(\w+) = (0x[0-9a-fA-F]+),", enum, re.M)}
    assert declared == {code: name for code, (name, _) in errors.ERROR_CODES.items()}


@pytest.mark.parametrize(
    "text,code,name",
    [("Failed to execute method forward, error: 0x20", 0x20, "NotFound"),
     ("load_method failed with error 0x14", 0x14, "OperatorMissing"),
     ("Init failed for backend QnnBackend: 0x1", None, None)],
)
def test_find_and_describe(text, code, name):
    assert errors.find_error_code(text) == code
    if code is not None:
        assert f"Error::{name}" in errors.describe(code)
