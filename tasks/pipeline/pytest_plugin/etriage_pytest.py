"""pytest plugin loaded into suite runs (`-p etriage_pytest`, its directory on PYTHONPATH).

It lives outside the `tasks` package on purpose: the suite's Python may be another
environment, and putting tasks/pipeline on PYTHONPATH would shadow stdlib names.
The run's JSON config file is named by ETRIAGE_PYTEST_CONFIG:

    {"only": [node ids]}        keep only these tests (base runs of head's failures, retries);
                                an id that does not exist here is simply not collected
    {"leave_out": [node ids]}   deselect these (a fixed suite's tests this worker learnt it
                                cannot run, tasks/pipeline/unrunnable.py)
    {"order": [node ids or files]}
                                run in this order (the selection's rank): a test named here
                                before a file named here, the rest in collection order after
    {"budget": {"seconds": S, "paths": [files]}}
                                the wall-clock SAFETY NET, not the budget (the selection spends
                                a budget in learned CPU seconds before the run): once tests of
                                these files have run for S seconds of wall time, the rest of
                                them are skipped (reason starts with "etriage: over")
    {"record": path}            per test, its CPU seconds (this process and its threads) and,
                                with "coverage": true, the lines of the package it executed:
                                {"cpu": {node id: s}, "wall": {node id: s},
                                 "lines": {node id: {path: [lines]}},
                                 "coverage": "" or why it could not be measured}
                                ("package": the measured package's name, executorch by default)
                                paths are the package's (`exir/x.py`), mapped from each
                                imported module's name, so symlinked or hard-linked trees agree
"""
from __future__ import annotations

import json
import os
import sys
import time

BUDGET_REASON = "etriage: over the wall-clock safety limit"
PACKAGE = "executorch"
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
    if _state.get("record"):
        _state["cpu"], _state["wall"], _state["lines"], _state["coverage_error"] = {}, {}, {}, ""
        if _state.get("coverage"):
            _start_coverage()


def _start_coverage() -> None:
    try:
        import coverage  # only when asked: the suite's Python may not have it
    except ImportError as error:
        _state["coverage_error"] = f"coverage is not installed in the suite's Python ({error})"
        return
    # no data file: the lines are read from memory at the end and written as JSON
    cov = coverage.Coverage(data_file=None, source_pkgs=[_state.get("package", PACKAGE)], config_file=False,
                            omit=["*/test_*.py", "*_test.py", "*/conftest.py"])
    cov.start()
    _state["cov"] = cov


def pytest_collection_modifyitems(session, config, items):
    only = _state.get("only")
    if only is not None:
        keep = set(only)
        deselected = [i for i in items if i.nodeid not in keep]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
        items[:] = [i for i in items if i.nodeid in keep]
    leave_out = set(_state.get("leave_out") or ())
    if leave_out:
        deselected = [i for i in items if i.nodeid in leave_out]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
        items[:] = [i for i in items if i.nodeid not in leave_out]
    order = _state.get("order")
    if order:
        rank = {name: i for i, name in enumerate(order)}
        last = len(rank)
        position = {id(item): n for n, item in enumerate(items)}
        items.sort(key=lambda item: (rank.get(item.nodeid, rank.get(item.nodeid.split("::", 1)[0], last)),
                                     position[id(item)]))


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

        pytest.skip(f"{BUDGET_REASON} ({budget['seconds']:.0f}s of wall time spent on selected tests)")


def pytest_runtest_protocol(item, nextitem):
    """Around each test (setup, call, teardown): its CPU time and its own coverage context."""
    if "cpu" not in _state:
        return None
    cov = _state.get("cov")
    if cov is not None:
        cov.switch_context(item.nodeid)
    _state["running"] = (item.nodeid, time.process_time(), time.monotonic())
    return None


def pytest_runtest_logfinish(nodeid, location):
    running = _state.pop("running", None)
    if running and running[0] == nodeid:
        _state["cpu"][nodeid] = round(time.process_time() - running[1], 3)
        _state["wall"][nodeid] = round(time.monotonic() - running[2], 3)
        if _state.get("cov") is not None:
            _state["cov"].switch_context("")


def pytest_unconfigure(config):
    if "cpu" not in _state:
        return
    cov = _state.pop("cov", None)
    if cov is not None:
        cov.stop()
        _state["lines"] = _lines_by_test(cov.get_data())
    out = {"cpu": _state["cpu"], "wall": _state["wall"], "lines": _state["lines"],
           "coverage": _state["coverage_error"]}
    with open(_state["record"], "w") as f:  # in place: in the sandbox only this file is writable
        json.dump(out, f)


def _package_paths() -> dict[str, str]:
    """The real path of every imported module of the package -> its path in the package
    (`executorch.exir.pass_base` -> `exir/pass_base.py`), by module name."""
    found, package = {}, _state.get("package", PACKAGE)
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if not file or not name.startswith(package + ".") or not file.endswith(".py"):
            continue
        rel = name[len(package) + 1:].replace(".", "/")
        rel += "/__init__.py" if file.endswith("__init__.py") else ".py"
        found[os.path.realpath(file)] = rel
    return found


def _lines_by_test(data) -> dict[str, dict[str, list[int]]]:
    paths = _package_paths()
    lines: dict[str, dict[str, list[int]]] = {}
    for measured in data.measured_files():
        rel = paths.get(os.path.realpath(measured))
        if rel is None:
            continue
        for line, contexts in (data.contexts_by_lineno(measured) or {}).items():
            for context in contexts:
                if context:  # "" is collection and import time: no test's own
                    lines.setdefault(context, {}).setdefault(rel, []).append(line)
    for by_file in lines.values():
        for rel in by_file:
            by_file[rel].sort()
    return lines
