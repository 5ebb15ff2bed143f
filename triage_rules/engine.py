"""The engine's front door: a log (text, file or JUnit XML) in, Failure records out.

    read (readers) ─▶ extract candidates and groups (extract) ─▶ one Failure per group
    ─▶ match the rule set (rules) ─▶ category, title, explanation, owners, environment
"""
from __future__ import annotations

import os
from collections.abc import Iterable

from triage_rules import errors
from triage_rules.extract import Extractor, FailureGroup
from triage_rules.fingerprint import fingerprint
from triage_rules.readers import LogReadError, check_path, iter_blocks_of_text, iter_text_blocks
from triage_rules.records import CATEGORIES, Failure
from triage_rules.rules import Subject, default_rules, match_rules, owners_for_path

MAX_FAILURES = 50
_XML_SNIFF = 2048


def classify_text(text: str, *, job_name: str | None = None) -> list[Failure]:
    """Failures in a log given as text, primary failure first."""
    if _looks_like_junit(text[:_XML_SNIFF]):
        return _classify_junit(text, job_name)
    return classify_blocks(iter_blocks_of_text(text), job_name=job_name)


def classify_file(path: str | os.PathLike, *, job_name: str | None = None) -> list[Failure]:
    """Failures in a log file (streamed: memory stays bounded), primary failure first.

    Raises LogReadError for a missing path, a directory or binary data.
    """
    check_path(path)
    with open(path, "rb") as stream:
        head = stream.read(_XML_SNIFF)
        stream.seek(0)
        if _looks_like_junit(head.decode("utf-8", "replace")):
            if b"\x00" in head:
                raise LogReadError("binary file, not a log")
            return _classify_junit(stream.read().decode("utf-8", "replace"), job_name)
        return classify_blocks(iter_text_blocks(stream), job_name=job_name)


def classify_blocks(blocks: Iterable[str], *, job_name: str | None = None) -> list[Failure]:
    groups = Extractor().run(blocks)
    return [to_failure(group, job_name) for group in groups[:MAX_FAILURES]]


def to_failure(group: FailureGroup, job_name: str | None = None) -> Failure:
    """One Failure record from an extracted group, classified by the rule set."""
    best = group.best
    with_exception = best if best.info.exception else next(
        (c for c in sorted(group.evidence, key=lambda c: -c.score) if c.info.exception), None
    )
    exception = with_exception.info.exception if with_exception else None
    message = best.info.message if best.info.exception or not with_exception else with_exception.info.message
    frames = best.frames or next((c.frames for c in group.evidence if c.frames), [])
    failure = Failure(
        line=best.line,
        line_no=best.line_no,
        test=group.test,
        exception=exception,
        message=message or best.line.strip(),
        context=best.context,
        frames=list(frames),
        fingerprint=fingerprint(group.test or "", exception or "", message or best.line),
    )
    evidence = tuple(c.line for c in sorted(group.evidence, key=lambda c: c.line_no) if c is not best)
    apply_rules(failure, evidence, job_name, best.info.kind)
    return failure


def apply_rules(failure: Failure, evidence: tuple[str, ...] = (), job_name: str | None = None, kind: str = "") -> None:
    """Fill category, rule, title, explanation, suggestion, owners and environment."""
    subject = Subject(
        primary=failure.line,
        lines=evidence,
        message=failure.message,
        exception=failure.exception or "",
        test=failure.test or "",
        frames=tuple(f.file for f in failure.frames),
        job=job_name or "",
    )
    found = match_rules(default_rules(), subject)
    values = _template_values(failure)
    if found is None:
        failure.category = "other"
        failure.rule = "unclassified"
        failure.title = f"Unclassified failure ({kind or 'log line'})"
        failure.explanation = f"No rule recognises this failure; the best line the log offers is: {failure.line.strip()}"
        failure.suggestion = "Read the context lines around the primary line; add a rule if this recurs."
    else:
        rule = found.rule
        values.update(found.captures)
        category = _fill(rule.category, values)
        failure.category = category if category in CATEGORIES else "other"
        failure.rule = rule.id
        failure.title = _fill(rule.title, values)
        failure.explanation = _fill(rule.explanation, values)
        failure.suggestion = _fill(rule.suggestion, values) if rule.suggestion else ""
        failure.environment = rule.environment
        failure.owners = _owners(rule.owners, failure)
    if not failure.owners:
        failure.owners = _owners((), failure)


class _Values(dict):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def _template_values(failure: Failure) -> _Values:
    code = errors.find_error_code(failure.message) or errors.find_error_code(failure.line)
    return _Values(
        line=failure.line.strip(),
        test=failure.test or "(no test id)",
        exception=failure.exception or "",
        message=failure.message,
        error_name=errors.describe(code) if code is not None else "",
    )


def _fill(template: str, values: _Values) -> str:
    try:
        return template.format_map(values)
    except (ValueError, IndexError):
        return template  # a literal brace in a template: show it as written


def _owners(rule_owners: tuple[str, ...], failure: Failure) -> list[str]:
    owners: list[str] = []
    for entry in rule_owners:
        owners.extend([entry] if entry.startswith("@") else owners_for_path(entry))
    for frame in reversed(failure.frames):  # the innermost ExecuTorch frame says whose code raised
        found = owners_for_path(frame.file)
        if found:
            owners.extend(found)
            break
    return list(dict.fromkeys(owners))


def _looks_like_junit(head: str) -> bool:
    start = head.lstrip("\ufeff \t\r\n")
    return start.startswith("<?xml") and "<testsuite" in head or start.startswith(("<testsuites", "<testsuite"))


def _classify_junit(text: str, job_name: str | None) -> list[Failure]:
    from triage_rules.junit import failures_from_junit

    return failures_from_junit(text, job_name=job_name)
