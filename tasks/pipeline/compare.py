"""Stage 4, compare: head results against the merge base's, one verdict per failing test.

    environment   the engine says the environment is at fault (checked first: never blamed), or
                  a package the worker lacks is missing at head and at the merge base alike
    pre_existing  fails at head and at the merge base
    flaky         failed at head, passed when retried at the same head
    new           fails at head, passed (or did not exist) at the merge base
    fixed         failed at the merge base, passes at head (suites with whole merge-base results)
"""
from __future__ import annotations

import re

from tasks.records import SuiteResult, TestResult, Verdict

FAILED = ("failed", "error")
Key = tuple[str, str, str]  # (suite, target, test)
_MISSING = re.compile(r"No module named '([\w.]+)'")


def crash_test(suite: SuiteResult) -> TestResult:
    """A suite that left no JUnit results becomes one failing pseudo-test with its log."""
    return TestResult(suite=suite.suite, test=f"{suite.suite} (suite crashed)", target=suite.target,
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
    return f"{'_' * 20} {test.test} {'_' * 20}\n{test.text or test.message}\n{summary}\n"


def classify_failing(head: dict[Key, TestResult], classify) -> dict[Key, list]:
    return {key: classify(as_pytest_log(test), job_name=test.suite, failed=True)
            for key, test in head.items() if test.outcome in FAILED}


def retry_candidates(base: dict[Key, TestResult], head: dict[Key, TestResult],
                     failures: dict[Key, list]) -> list[Key]:
    """Tests that would be `new` unless a retry passes: only these are retried."""
    return [key for key, found in failures.items()
            if not any(f.environment for f in found)
            and not (key in base and base[key].outcome in FAILED)
            and not key[2].endswith("(suite crashed)")]


def decide(base: dict[Key, TestResult], head: dict[Key, TestResult], failures: dict[Key, list],
           retried: dict[Key, TestResult], complete: set[tuple[str, str]] | None = None) -> list[Verdict]:
    """`complete`: (suite, target) pairs whose merge-base results are whole; `fixed` is only
    said for those (None: all)."""
    verdicts = []
    for key, test in head.items():
        base_test = base.get(key)
        base_outcome = base_test.outcome if base_test else "absent"
        if test.outcome in FAILED:
            found = failures.get(key, [])
            if any(f.environment for f in found) or _same_missing_package(test, base_test):
                verdict = "environment"
            elif base_outcome in FAILED:
                verdict = "pre_existing"
            elif key in retried and retried[key].outcome == "passed":
                verdict = "flaky"
            else:
                verdict = "new"
            failure = primary(found)
            verdicts.append(Verdict(
                suite=key[0], test=key[2], target=key[1], base=base_outcome, head=test.outcome,
                verdict=verdict,
                category=failure.category if failure else "other",
                rule=failure.rule if failure else "",
                primary_line=(failure.line if failure else test.message)[:400],
                fingerprint=failure.fingerprint if failure else "",
                title=failure.title if failure else "",
                explanation=failure.explanation if failure else "",
                suggestion=failure.suggestion if failure else "",
                log_excerpt=_excerpt(test.text or test.message, failure),
                decided_by=failure.decided_by if failure else "",
                confidence=failure.confidence if failure else 0.0,
                looks_like=list(failure.looks_like) if failure else []))
        elif base_outcome in FAILED and test.outcome == "passed" and (complete is None or key[:2] in complete):
            verdicts.append(Verdict(suite=key[0], test=key[2], target=key[1], base=base_outcome,
                                    head=test.outcome, verdict="fixed"))
    return verdicts


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


def _excerpt(text: str, failure, limit: int = 3000) -> str:
    """The lines around the primary line when the engine found one, else the tail."""
    if failure and failure.context:
        return "\n".join(failure.context)[-limit:]
    return (text or "")[-limit:]
