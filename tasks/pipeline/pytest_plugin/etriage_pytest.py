"""pytest plugin loaded into suite runs (`-p etriage_pytest`, its directory on PYTHONPATH).

It lives outside the `tasks` package on purpose: the suite's Python may be another
environment, and putting tasks/pipeline on PYTHONPATH would shadow stdlib names.
The run's JSON config file is named by ETRIAGE_PYTEST_CONFIG:

    {"only": [node ids]}        keep only these tests (base runs of head's failures, retries);
                                an id that does not exist here is simply not collected
    {"budget": {"seconds": S, "paths": [files]}}
                                once tests of these files have run for S seconds, the rest
                                of them are skipped (reason starts with "etriage: over")
"""
from __future__ import annotations

import json
import os
import sys
import time

BUDGET_REASON = "etriage: over the time budget"
QNN_PACKAGE = "executorch.backends.qualcomm"
NO_QNN_SDK = (f"No module named '{QNN_PACKAGE}': refused by etriage, the QNN SDK is not available "
              "(QNN_SDK_ROOT is not set) and etriage never lets it be downloaded")
_state: dict = {}


class _NoQnnWithoutSdk:
    """Importing the QNN backend without QNN_SDK_ROOT downloads the proprietary SDK: refuse it,
    so a test that needs it fails at collection with an error the engine files as environment."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == QNN_PACKAGE or name.startswith(QNN_PACKAGE + "."):
            raise ModuleNotFoundError(NO_QNN_SDK, name=name)
        return None


if not os.environ.get("QNN_SDK_ROOT"):
    sys.meta_path.insert(0, _NoQnnWithoutSdk())


def pytest_configure(config):
    path = os.environ.get("ETRIAGE_PYTEST_CONFIG")
    _state.clear()
    if path:
        with open(path) as f:
            _state.update(json.load(f))


def pytest_collection_modifyitems(session, config, items):
    only = _state.get("only")
    if only is None:
        return
    keep = set(only)
    selected = [i for i in items if i.nodeid in keep]
    deselected = [i for i in items if i.nodeid not in keep]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
    items[:] = selected


def _in_budget_paths(item, paths) -> bool:
    file = item.nodeid.split("::", 1)[0]
    return file in paths


def pytest_runtest_setup(item):
    budget = _state.get("budget")
    if not budget or not _in_budget_paths(item, budget["paths"]):
        return
    started = _state.setdefault("budget_started", time.monotonic())
    spent = time.monotonic() - started
    if spent > budget["seconds"]:
        import pytest  # here, so the pipeline can import BUDGET_REASON without pytest

        pytest.skip(f"{BUDGET_REASON} ({budget['seconds']:.0f}s spent on selected tests)")
