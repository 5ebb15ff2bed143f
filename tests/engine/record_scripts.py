"""The corpus record scripts (`scripts/*.py`), loaded for their tests: by name, once, with their
folder on sys.path (they import each other by name), and the marker for those needing QNN."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tasks.qnn import sdk

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
PROVISIONED_QNN = sdk.default_root(sys.prefix)
needs_provisioned_qnn = pytest.mark.skipif(sdk.find_sdk({}, PROVISIONED_QNN)[0] is None,
                                           reason=f"QNN not provisioned at {PROVISIONED_QNN} (make install)")


def load_script(name: str):
    if name not in sys.modules:
        if str(SCRIPTS) not in sys.path:
            sys.path.insert(0, str(SCRIPTS))
        spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
