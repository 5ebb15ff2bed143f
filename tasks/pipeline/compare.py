"""Stage 4, compare: the one verdict engine. A failing test of the bot's own run and a failure
in a CI job's log are judged by the same rule (`judge`) and set aside by the same ignores
(`apply_ignores`), so every verdict means the same wherever it was found:

    environment   the engine says the environment is at fault (checked first: never blamed), or
                  a package the worker lacks is missing at head and at the merge base alike, or
                  the merge base's environment could not be made or is not healthy
    pre_existing  fails at head and at the merge base (CI: the merge base's CI has the same
                  fingerprint)
    flaky         failed at head, passed when retried at the same head
    not_in_log    all the log holds is a CI wrapper's exit line: the real error is elsewhere
                  (the job's page); neither new nor the environment's
    new           fails at head, passed (or did not exist) at the merge base
    fixed         failed at the merge base, passes at head (suites with whole merge-base results)
    ignored       would be new, but a maintainer set it aside (`/etriage ignore`): shown with the
                  reason, counted nowhere (headline, conclusion, annotations, labels)
"""
from __future__ import annotations

import dataclasses
import hashlib
import re

from tasks.records import VERDICTS, SuiteResult, TestResult, Verdict
from triage_rules.records import Failure
from triage_rules.roots import root_keys

FAILED = ("failed", "error")
Key = tuple[str, str, str]  # (suite, target, test)
_MISSING = re.compile(r"No module named '([\w.]+)'")
# What excuses the change; a `new` verdict never says it (the category's text is for a
# confident environment verdict, and a model only leaning to ci_infra is not one).
_EXCUSE = re.compile(r"(?i)not (?:caused by )?(?:the|this) change|not the change's|not failed by the change"
                     r"|re-?run the job|it is the infrastructure's")


CRASHED = "(suite crashed)"  # the pseudo-test of a suite that left no JUnit results


def crash_test_name(suite: str) -> str:
    return f"{suite} {CRASHED}"


def crash_test(suite: SuiteResult) -> TestResult:
    """A suite that left no JUnit results becomes one failing pseudo-test with its log."""
    return TestResult(suite=suite.suite, test=crash_test_name(suite.suite), target=suite.target,
                      outcome="error", message=suite.reason, text=suite.log_excerpt)


def index(results: list[SuiteResult]) -> dict[Key, TestResult]:
    tests: dict[Key, TestResult] = {}
    for suite in results:
        items = [crash_test(suite)] if suite.status == "crashed" else suite.tests
        for test in items:
            tests[(test.suite, test.target, test.test)] = test
    return tests


def primary(failures: list):
    """The failure that speaks for a test: an environment one first, then a categorised one."""
    if not failures:
        return None
    return (next((f for f in failures if f.environment), None)
            or next((f for f in failures if f.category != "other"), None)
            or failures[0])


def as_pytest_log(test: TestResult) -> str:
    """The failure as pytest prints it (section header, body, summary line), so the engine
    sees the test id and its test-name rules apply as they do on a CI log."""
    message = (test.message or "").strip().splitlines()[:1]
    summary = f"{test.outcome.upper()} {test.test}" + (f" - {message[0]}" if message else "")
    if test.test == crash_test_name(test.suite):
        # not a pytest summary line: it would outrank the log's own error line ("no JUnit
        # results (exit code 3)" over the ModuleNotFoundError that stopped pytest); it still
        # speaks when the log has nothing better (a kill at the wall-clock limit)
        summary = f"etriage: suite {test.suite} on {test.target}: " + (message[0] if message else "no results")
    return f"{'_' * 20} {test.test} {'_' * 20}\n{test.text or test.message}\n{summary}\n"


def classify_failing(head: dict[Key, TestResult], classify) -> dict[Key, list]:
    return {key: classify(as_pytest_log(test), job_name=test.suite, failed=True)
            for key, test in head.items() if test.outcome in FAILED}


def retry_candidates(base: dict[Key, TestResult], head: dict[Key, TestResult],
                     failures: dict[Key, list], base_failures: dict[Key, list] | None = None) -> list[Key]:
    """Tests that would be `new` unless a retry passes: only these are retried."""
    base_failures = base_failures or {}
    return [key for key, found in failures.items()
            if not any(f.environment for f in found)
            and not (key in base and base[key].outcome in FAILED
                     and not fails_otherwise(found, base_failures.get(key)))
            and not key[2].endswith(CRASHED)]


def fails_otherwise(found: list, base_found: list | None) -> bool:
    """A test that fails at the merge base too, but of another root cause (triage_rules.roots):
    at head the change's error, at the merge base something else (a backend the runtime lacks,
    another assertion). Only when both sides were read and name a root; when in doubt, alike."""
    head, base = primary(found), primary(base_found or [])
    if head is None or base is None or not head.message or not base.message:
        return False
    return not set(root_keys(head)) & set(root_keys(base)) and head.fingerprint != base.fingerprint


def judge(found: list[Failure], *, failed_at_base: bool, passed_on_retry: bool = False,
          environment: bool = False) -> str:
    """The verdict of one failure at head, whoever found it. `environment`: the caller knows
    more than the engine (a package missing at head and at the merge base alike)."""
    if found and all(f.error_not_in_log for f in found):
        return "not_in_log"
    if environment or any(f.environment for f in found):
        return "environment"
    if failed_at_base:
        return "pre_existing"
    if passed_on_retry:
        return "flaky"
    return "new"


def decide(base: dict[Key, TestResult], head: dict[Key, TestResult], failures: dict[Key, list],
           retried: dict[Key, TestResult], complete: set[tuple[str, str]] | None = None,
           base_broken: str = "", base_failures: dict[Key, list] | None = None) -> list[Verdict]:
    """The bot's own run: one verdict per failing test (and per fixed one). `complete`:
    (suite, target) pairs whose merge-base results are whole; `fixed` is only said for those
    (None: all). `base_broken`: why the merge base's environment cannot be trusted (it could not
    be made, or is not healthy); then no failure is new or pre-existing, all are `environment`.
    `base_failures`: the engine's reading of the tests that failed at both sides; one that fails
    otherwise at the merge base is not pre-existing (fails_otherwise)."""
    if base_broken:
        base, retried, complete = {}, {}, set()
    base_failures = base_failures or {}
    verdicts = []
    for key, test in head.items():
        base_test = base.get(key)
        base_outcome = base_test.outcome if base_test else "absent"
        if test.outcome in FAILED:
            found = failures.get(key, [])
            failure = primary(found) or Failure(line=test.message, line_no=0, test=test.test,  # no engine
                                                fingerprint=_test_fingerprint(test.test))
            otherwise = base_outcome in FAILED and fails_otherwise(found, base_failures.get(key))
            verdict = judge(found, failed_at_base=base_outcome in FAILED and not otherwise,
                            passed_on_retry=key in retried and retried[key].outcome == "passed",
                            environment=bool(base_broken) or _same_missing_package(test, base_test))
            if otherwise and verdict in ("new", "flaky"):
                elsewhere = primary(base_failures[key]).line.strip()[:200]
                failure = dataclasses.replace(failure, explanation=(
                    f"{failure.explanation} At the merge base this test fails too, of another cause: "
                    f"{elsewhere}").strip())
            verdicts.append(Verdict(
                suite=key[0], test=key[2], target=key[1], base=base_outcome, head=test.outcome,
                verdict=verdict, failure=worded_for(verdict, failure),
                log_excerpt=_excerpt(test.text or test.message, failure)))
        elif base_outcome in FAILED and test.outcome == "passed" and (complete is None or key[:2] in complete):
            verdicts.append(Verdict(suite=key[0], test=key[2], target=key[1], base=base_outcome,
                                    head=test.outcome, verdict="fixed"))
    return assign_roots(verdicts)


def decide_ci(found: list[tuple[dict, Failure]], base_fingerprints: set[str]) -> list[Verdict]:
    """CI logs: (job, failure) pairs of the failed jobs at head, judged against the merge
    base's CI (the fingerprints recorded for it). A job is the verdict's suite, its runner the
    target; a CI job is not retried here, so nothing of it is called flaky."""
    verdicts = []
    for job, failure in found:
        at_base = failure.fingerprint in base_fingerprints
        verdict = judge([failure], failed_at_base=at_base)
        verdicts.append(Verdict(
            suite=job["name"], test=failure.test or "", target=job.get("runner_name") or "ci",
            base="failed" if at_base else "absent", head="failed",
            verdict=verdict, failure=worded_for(verdict, failure),
            log_excerpt=_excerpt("", failure), link=job.get("html_url") or ""))
    return assign_roots(verdicts)


def assign_roots(verdicts: list[Verdict]) -> list[Verdict]:
    """Give each verdict its root: verdicts sharing a fingerprint or any root key
    (triage_rules.roots: the same exception and message; the same raise site and message shape;
    the same probe problem) are one root, joined transitively and named by its oldest key."""
    parent: dict[str, str] = {}  # key -> a key of the same root seen earlier
    seen: dict[str, int] = {}  # key -> when it was first seen

    def find(key: str) -> str:
        seen.setdefault(key, len(seen))
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    keyed = []
    for verdict in verdicts:
        if verdict.failure is None:
            verdict.root = f"{verdict.suite}/{verdict.target}/{verdict.test}"
            continue
        keys = [*root_keys(verdict.failure), f"fp:{verdict.fingerprint}"]
        roots = sorted({find(key) for key in keys}, key=seen.__getitem__)
        for other in roots[1:]:
            parent[other] = roots[0]
        keyed.append((verdict, keys[0]))
    for verdict, key in keyed:
        verdict.root = find(key)
    return verdicts


def spread(group: list[Verdict], ci: bool = False) -> str:
    """Where one root cause showed, compactly: "in 5 tests and 3 probes"; of CI logs, "in 2 jobs"."""
    kinds: dict[str, set] = {}
    for verdict in group:
        kind = "job" if ci else "probe" if verdict.suite == "probes" else "test"
        kinds.setdefault(kind, set()).add(verdict.suite if ci else (verdict.suite, verdict.test, verdict.target))
    return "in " + " and ".join(f"{len(items)} {kind}{'s' if len(items) != 1 else ''}" for kind, items in kinds.items())


def by_root(verdicts: list[Verdict]) -> list[list[Verdict]]:
    """The verdicts grouped by verdict and root cause, in the order the roots first appear."""
    groups: dict[tuple, list[Verdict]] = {}
    for verdict in verdicts:
        groups.setdefault((verdict.verdict, verdict.root or verdict.fingerprint or id(verdict)), []).append(verdict)
    return list(groups.values())


def worded_for(verdict: str, failure: Failure) -> Failure:
    """The failure as the verdict may speak of it: a `new` one is never excused ("not the
    change", "re-run the job"), whatever its category's text says. A copy when reworded."""
    if verdict != "new" or not (_EXCUSE.search(failure.explanation) or _EXCUSE.search(failure.suggestion)):
        return failure
    return dataclasses.replace(
        failure,
        explanation=(f"It looks like `{failure.category}` ({failure.title or 'no title'}), but not surely enough "
                     f"to blame the environment, and it did not fail at the merge base: {failure.line.strip()}"),
        suggestion="Run it at the merge base (or on another runner) to tell the environment from the change.")


def _test_fingerprint(test: str) -> str:
    """The key of a failure the engine said nothing about (a custom `classify`): the test id."""
    return hashlib.sha1(test.encode()).hexdigest()[:16]


def apply_ignores(verdicts: list[Verdict], ignored: dict[str, str]) -> dict[str, int]:
    """A new failure a maintainer ignored (by fingerprint or test id) becomes `ignored` with
    the reason; the verdicts' counts afterwards."""
    for verdict in verdicts:
        reason = ignored.get(verdict.fingerprint) or ignored.get(verdict.test)
        if verdict.verdict == "new" and reason:
            verdict.verdict, verdict.ignored_reason = "ignored", reason
    return tally(verdicts)


def tally(verdicts: list[Verdict]) -> dict[str, int]:
    """verdict -> root causes (one failure in 5 tests counts once; see assign_roots)."""
    return {v: len({r.root or id(r) for r in verdicts if r.verdict == v}) for v in (*VERDICTS, "ignored")}


def missing_package(test: TestResult | None) -> str | None:
    """The third-party package a failed test could not import (`No module named 'tosa'`), or
    None; ExecuTorch's own modules do not count (a change can remove one)."""
    if test is None or test.outcome not in FAILED:
        return None
    found = _MISSING.search(f"{test.message}\n{test.text}")
    return found.group(1) if found and not found.group(1).startswith("executorch") else None


def _same_missing_package(head: TestResult, base: TestResult | None) -> bool:
    """A package the worker lacks at head and at the merge base alike: the environment's, not
    the change's (a change that adds the import fails only at head and stays `new`)."""
    name = missing_package(head)
    return name is not None and missing_package(base) == name


EXCERPT_BEFORE, EXCERPT_AFTER = 15, 4  # lines of the test's own output around its error


def _excerpt(text: str, failure, limit: int = 3000) -> str:
    """The test's own lines around its error: where the primary line, or the message of the
    summary line the engine read it from, stands in the test's output (the traceback above it);
    else the lines the engine kept around the primary line; else the tail. The summary line is
    etriage's own (as_pytest_log), so its neighbours are whatever section pytest printed last
    ("Captured Err" and nothing)."""
    lines = (text or "").splitlines()
    at = _error_at(lines, failure.line if failure else "")
    if at is not None:
        return "\n".join(lines[max(0, at - EXCERPT_BEFORE):at + EXCERPT_AFTER + 1])[-limit:]
    if failure and failure.context:
        return "\n".join(failure.context)[-limit:]
    return (text or "")[-limit:]


def _error_at(lines: list[str], primary: str) -> int | None:
    """The index of the last line of `lines` holding the primary line, or the message after a
    pytest summary's " - " ("FAILED t.py::x - AssertionError: ..."), at least 8 characters of it."""
    primary = primary.strip()
    wanted = [primary]
    if primary.startswith(("FAILED ", "ERROR ")) and " - " in primary:
        wanted.insert(0, primary.split(" - ", 1)[1].strip())
    for needle in wanted:
        needle = needle[:120]
        if len(needle) < 8:
            continue
        for i in range(len(lines) - 1, -1, -1):
            if needle in lines[i]:
                return i
    return None
