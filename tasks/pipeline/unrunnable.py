"""Tests this worker cannot run, learned from its own runs: selection and the fixed suites leave
them out.

A test judged `environment` at head (a backend the runtime lacks, a package missing at both
sides), or a selected test file that could not even be collected at head nor at the merge base,
cannot catch a regression on this worker. Running it again spends the selection's budget that a
test able to fail for the change could use, and puts the same entry on every pull request. So it
is remembered, per environment (`identity`: the compiled parts the run used, the torch the commit
pins and the worker's installed packages), for EXPIRY_DAYS, then tried once more. Selection
leaves out a file none of whose tests can run and runs the others of a file by node id; a fixed
pytest suite deselects the tests learnt of its files (`leave_out`; only node ids: a fixed suite's
file is never left out whole). A change that edits the file runs it whatever was learnt, and a run
in which the test passes forgets it.

Stored in <data_dir>/unrunnable.json, written atomically (concurrent runs may lose each other's
latest entries, never corrupt the file):

    {identity: {node id or file: {"why": text, "merge_base": sha, "at": epoch seconds}}}
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from importlib import metadata
from pathlib import Path

from tasks.records import SuiteResult, Verdict

FILE = "unrunnable.json"
EXPIRY_DAYS = 7
SUITE = "selected"  # the tests chosen for a change: a whole file of them may be learnt
MAX_WHY = 200


def identity(source: str, release: str, native_key: str, torch: str = "", packages: str = "") -> str:
    """The environment a lesson holds for: where its compiled parts came from (wheel, registry,
    built) and which (release, native key); the torch the commit pins; the worker's installed
    Python packages (`packages_of`). Another environment learns for itself: a package installed
    or upgraded on the worker, or a new torch pin, tries again what the old one taught."""
    return f"{source}:{release or '-'}:{native_key[:16] or '-'}:{torch or '-'}:{packages[:16] or '-'}"


def packages_of(site_packages: Path) -> str:
    """A digest of the distributions installed in `site_packages` (each `name==version`), the
    packages a test of this worker imports beside the commit's tree; "" when none is readable."""
    names = sorted({f"{(d.metadata['Name'] or '').lower()}=={d.version}"
                    for d in metadata.distributions(path=[str(site_packages)])})
    return hashlib.sha256("\n".join(names).encode()).hexdigest() if names else ""


def _read(data_dir: Path) -> dict:
    try:
        data = json.loads((Path(data_dir) / FILE).read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def load(data_dir: Path, ident: str, now: float | None = None) -> dict[str, str]:
    """node id or file -> why this worker cannot run it, for the lessons of `ident` not yet expired."""
    now = time.time() if now is None else now
    entries = _read(data_dir).get(ident, {})
    out = {}
    for path, entry in (entries.items() if isinstance(entries, dict) else ()):
        if not isinstance(entry, dict) or not isinstance(entry.get("at"), (int, float)):
            continue  # a damaged entry teaches nothing
        if now - entry["at"] < EXPIRY_DAYS * 86400:
            day = time.strftime("%Y-%m-%d", time.gmtime(entry["at"]))
            out[path] = (f"{str(entry.get('why', ''))[:MAX_WHY]} (learnt at the merge base "
                         f"{str(entry.get('merge_base', ''))[:12]} on {day}; tried again after {EXPIRY_DAYS} days, "
                         "or when a change edits its file)")
    return out


def _file(test: str) -> str:
    return test.split("::", 1)[0]


def lessons(head_results: list[SuiteResult], verdicts: list[Verdict],
            pytest_suites: frozenset[str] = frozenset()) -> tuple[dict[str, str], set[str]]:
    """(what cannot run here -> why, the tests that passed) from one run at head of the pytest
    suites named. What cannot run: a test judged `environment` (its node id), and a selected file
    that failed at collection at head and at the merge base alike (the file: none of its tests
    can run; a fixed suite's file always runs)."""
    suites = set(pytest_suites) | {SUITE}
    passed = {t.test for suite in head_results if suite.suite in suites for t in suite.tests if t.outcome == "passed"}
    out = {}
    for v in verdicts:
        if v.suite not in suites or not _file(v.test).endswith(".py"):
            continue  # not a pytest suite, or a crashed suite's pseudo-test
        whole_file = "::" not in v.test
        if (v.verdict == "environment" and (v.suite == SUITE or not whole_file)
                or v.verdict == "pre_existing" and whole_file and v.suite == SUITE):
            out[v.test] = _why(v)
    return out, passed


def leave_out(cannot_run: dict[str, str], paths: tuple[str, ...], changed: set[str]) -> dict[str, str]:
    """The learnt node ids (-> why) a fixed suite of these `paths` (files or folders) deselects:
    not those of a file the change edits."""
    def under(file: str) -> bool:
        return any(file == p or file.startswith(p.rstrip("/") + "/") for p in paths)

    return {t: why for t, why in cannot_run.items()
            if "::" in t and under(_file(t)) and _file(t) not in changed}


def _why(v: Verdict) -> str:
    """The lesson in words: what failed (the engine's title and the message it read)."""
    failure = v.failure
    if failure is None:
        return "environment"
    said = [p for p in (failure.title, failure.message or failure.line.strip()) if p]
    why = ": ".join(said[:1] + [p for p in said[1:] if p not in said[0]])
    kind = "failed for the environment" if v.verdict == "environment" else "could not be collected at either side"
    return f"{kind}: {why}"[:MAX_WHY]


def learn(data_dir: Path, ident: str, head_results: list[SuiteResult], verdicts: list[Verdict],
          merge_base: str, now: float | None = None,
          pytest_suites: frozenset[str] = frozenset()) -> dict[str, str]:
    """Fold one run in: remember what could not run here, forget what passed. Returns what it
    learnt (node id or file -> why)."""
    now = time.time() if now is None else now
    learnt, passed = lessons(head_results, verdicts, pytest_suites)
    data = _read(data_dir)
    entries = data.get(ident) if isinstance(data.get(ident), dict) else {}
    forget = passed | {_file(t) for t in passed}  # a test that passed, and its file, can run here
    if not learnt and not (forget & set(entries)):
        return {}
    for test in forget:
        entries.pop(test, None)
    for path, why in learnt.items():
        entries[path] = {"why": why, "merge_base": merge_base, "at": now}
    data[ident] = entries
    path = Path(data_dir) / FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, sort_keys=True))
    os.replace(tmp, path)
    return learnt
