"""pytest plugin for bench/selection.py (`-p selection_pytest`, a directory holding it on
PYTHONPATH). The run's JSON config is named by SELECTION_BENCH_CONFIG:

    {"events": path,                  JSON lines, appended and flushed as the run goes
     "only": [node ids] | null,       keep only these tests
     "in_order": bool,                run them in the order of "only" (not file by file)
     "timeouts": {node id: s},        per-test timeout (pytest-timeout marker)
     "cover": {"data_file": path, "include": [globs], "omit": [globs]} | null,
                                      per-test line coverage: one context per node id,
                                      "collect|<file>" while a test file is imported
     "warmup": [modules],             imported before collection (timed, context "warmup"),
                                      so a file's collection time is its own imports
     "give_up": {"failures": n, "seconds": s, "exempt": [files]} | null}
                                      the rest of a file is not run (outcome "abandoned") once
                                      its first n tests all failed (a backend whose runtime is
                                      absent fails every test, seconds each), or once its tests
                                      ran for s seconds (not for the exempt files)

Events: {"warmup": s}, {"collect": file, "seconds": s, "error": text}, {"start": node id},
{"test": node id, "outcome": passed|failed|skipped|abandoned, "seconds": s}, {"end": unix time}. A test with a "start"
and no "test" line was running when the process died (a crash or a hang).
"""
from __future__ import annotations

import importlib
import json
import os
import time

import pytest

GAVE_UP = "selection bench: not run at baseline"
_state: dict = {}


def _emit(**event) -> None:
    _state["events"].write(json.dumps(event) + "\n")
    _state["events"].flush()


def _switch(context: str) -> None:
    if _state.get("cov") is not None:
        _state["cov"].switch_context(context)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    path = os.environ.get("SELECTION_BENCH_CONFIG")
    if not path:
        return
    with open(path) as handle:
        _state.update(json.load(handle))
    _state["events"] = open(_state["events"], "a")
    cover = _state.get("cover")
    if cover:
        import coverage  # only the baseline measures lines

        _state["cov"] = coverage.Coverage(data_file=cover["data_file"], include=cover["include"],
                                          omit=cover.get("omit"), config_file=False)
        _state["cov"].start()
    if _state.get("warmup"):
        _switch("warmup")
        start = time.monotonic()
        for name in _state["warmup"]:
            importlib.import_module(name)
        _emit(warmup=round(time.monotonic() - start, 3))
        _switch("")


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    if not _state or not isinstance(collector, pytest.Module):
        yield
        return
    file = collector.nodeid
    _switch(f"collect|{file}")
    start = time.monotonic()
    outcome = yield
    seconds = time.monotonic() - start
    _switch("")
    report = outcome.get_result()
    _emit(collect=file, seconds=round(seconds, 3), error=str(report.longrepr)[-2000:] if report.failed else "")


def pytest_collection_modifyitems(session, config, items):
    if not _state:
        return
    only = _state.get("only")
    if only is not None:
        rank = {test: i for i, test in enumerate(only)}
        deselected = [i for i in items if i.nodeid not in rank]
        items[:] = [i for i in items if i.nodeid in rank]
        if _state.get("in_order"):
            items.sort(key=lambda item: rank[item.nodeid])
        if deselected:
            config.hook.pytest_deselected(items=deselected)
    timeouts = _state.get("timeouts") or {}
    for item in items:
        if item.nodeid in timeouts:
            item.add_marker(pytest.mark.timeout(timeouts[item.nodeid]))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    limit = _state.get("give_up")
    file = item.nodeid.split("::", 1)[0]
    passed, failed, seconds = _state.get("files", {}).get(file, (0, 0, 0.0))
    if limit and failed >= limit["failures"] and not passed:
        pytest.skip(f"{GAVE_UP}: its first {failed} tests all failed")
    if limit and seconds >= limit["seconds"] and file not in limit.get("exempt", ()):
        pytest.skip(f"{GAVE_UP}: its tests ran for {seconds:.0f}s")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not _state:
        yield
        return
    _state["outcome"], _state["seconds"] = "passed", 0.0
    _emit(start=item.nodeid)
    _switch(item.nodeid)
    yield
    _switch("")
    outcome = _state["outcome"]
    _emit(test=item.nodeid, outcome=outcome, seconds=round(_state["seconds"], 3))
    counts = _state.setdefault("files", {}).setdefault(item.nodeid.split("::", 1)[0], [0, 0, 0.0])
    counts[0] += outcome == "passed"
    counts[1] += outcome == "failed"
    counts[2] += _state["seconds"]


def pytest_runtest_logreport(report):
    if not _state or "outcome" not in _state:
        return
    _state["seconds"] += report.duration
    if report.failed:
        _state["outcome"] = "failed"
    elif report.skipped and _state["outcome"] == "passed":
        gave_up = GAVE_UP in str(report.longrepr)
        _state["outcome"] = "abandoned" if gave_up else "skipped"  # skipped, or an expected failure


def pytest_sessionfinish(session):
    if _state:
        _emit(end=time.time())  # before coverage is saved: that is the bench's cost, not the run's


def pytest_unconfigure(config):
    if not _state:
        return
    if _state.get("cov") is not None:
        _state["cov"].stop()
        _state["cov"].save()
    _state["events"].close()
    _state.clear()
