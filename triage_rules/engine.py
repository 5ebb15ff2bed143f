"""The engine's front door: a log (text, file or JUnit XML) in, Failure records out.

    read (readers) ─▶ extract candidates and groups (extract) ─▶ one Failure per group
    ─▶ match the rule set (rules) ─▶ category, title, explanation, owners, environment
    ─▶ the learned model's opinion and the nearest corpus records (model)
    ─▶ one decision from both (decide): category, decided_by, confidence

`failed=True` says the caller knows the job or test failed: then at least one failure comes
back, the most error-like line of the log's tail with a low confidence when nothing matched.
`use_model=False` gives the rules' reading alone (what the model itself is trained on).
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import replace

from triage_rules import errors
from triage_rules.decide import decide
from triage_rules.extract import Extractor, FailureGroup
from triage_rules.fingerprint import fingerprint
from triage_rules.junit import read_junit
from triage_rules.model import default_model, fields_of, opinions
from triage_rules.scorer import Scorer
from triage_rules.testnames import test_names, without_names
from triage_rules.readers import LogReadError, check_path, clean_line, iter_blocks_of_text, iter_text_blocks
from triage_rules.records import CATEGORIES, Failure
from triage_rules.rules import Subject, default_rules, match_rules, owners_of

MAX_FAILURES = 50
MAX_EVIDENCE_LINES = 12  # plus the primary line's neighbourhood (extract.NEIGHBOURHOOD_*)
FALLBACK_CONFIDENCE = 0.2
FALLBACK_CEILING = 0.5
FALLBACK_RULE_LINES = 400  # the tail's last lines a rule is looked for in, when nothing was extracted
# A failure whose own lines match only a rule below this priority (or a weak one, or none) is
# read with its context lines too (apply_rules); a specific rule matching the failure itself is
# not second-guessed by them. Its context (3 lines either side), not its whole neighbourhood
# (23): grouped CV 86.1% against 86.7%, at 246 MB/s against 173 (bench/classify.py, 20 MB).
NEARBY_BELOW = 66
# How error-like a line is when nothing matched in a failed job's log: each word counts.
_ERRORISH = re.compile(
    r"(?i)\b(?:error|errors|fail\w*|fatal|exception|traceback|cannot|can't|couldn't|unable|not (?:found|supported"
    r"|allowed|registered|close|equal|match\w*)|invalid|mismatch\w*|abort\w*|killed|denied|refused|timed? ?out"
    r"|offline|unauthori[sz]ed|missing|no such|crash\w*|panic|segfault|wrong|unexpected|incorrect|differ\w*"
    r"|same (?:output|answer|result|token)s?|nan|garbage|broken|lost|disconnected|unavailable|exceed\w*)\b")
# Any trace of trouble at all, inside words too (`AssertionError`, `FAILED`, `warning:`): a failed
# job's log without one is quiet, and its last lines are then no evidence of a category.
_ANY_TROUBLE = re.compile(
    r"(?i)error|exception|fail|fatal|traceback|assert|abort|panic|segfault|denied|refused|timed? ?out|not found"
    r"|mismatch|invalid|unable|cannot|can't|couldn't|unsupported|not supported|missing|warning|wrong|expected|differ")
_XML_SNIFF = 2048


def classify_text(text: str, *, job_name: str | None = None, failed: bool = False,
                  use_model: bool = True) -> list[Failure]:
    """Failures in a log given as text, primary failure first."""
    if _looks_like_junit(text[:_XML_SNIFF]):
        return _classify_junit(text, job_name)
    return classify_blocks(iter_blocks_of_text(text), job_name=job_name, failed=failed, use_model=use_model)


def classify_file(path: str | os.PathLike, *, job_name: str | None = None, failed: bool = False,
                  use_model: bool = True) -> list[Failure]:
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
        return classify_blocks(iter_text_blocks(stream), job_name=job_name, failed=failed, use_model=use_model)


def classify_blocks(blocks: Iterable[bytes | str], *, job_name: str | None = None, failed: bool = False,
                    use_model: bool = True) -> list[Failure]:
    extractor = Extractor()
    groups = extractor.run(block.encode("utf-8", "surrogatepass") if isinstance(block, str) else block
                           for block in blocks)
    failures = [to_failure(group, job_name) for group in groups[:MAX_FAILURES]]
    if not failures and failed:
        failures = [fallback_failure(extractor, job_name) or empty_log_failure()]
    if use_model:
        add_opinions(failures, job_name)
    for failure in failures:
        if failure.rule in ("fallback-line", "empty-log", "quiet-log"):  # a guess: never more than half sure
            failure.confidence = min(failure.confidence or FALLBACK_CONFIDENCE, FALLBACK_CEILING)
    return failures


def failure_of_excerpt(text: str) -> Failure:
    """The rules' reading of a failed job's log: what the model is trained on."""
    found = classify_text(text, failed=True, use_model=False)
    return found[0] if found else Failure(line="", line_no=1, message="")


def add_opinions(failures: list[Failure], job_name: str | None = None, model: Scorer | None = None,
                 calibrate: bool = True) -> None:
    """The model's opinion on each failure, folded into its category (decide). `model`: the
    default one (trained on the shipped corpus) unless given; `calibrate=False` keeps the raw
    confidence (what the calibration is fitted on)."""
    if model is None and failures:
        model = default_model(failure_of_excerpt)
    found = opinions(model, [fields_of(f, job_name) for f in failures]) if model else [None] * len(failures)
    for failure, opinion in zip(failures, found):
        decide(failure, opinion, calibrate)


def empty_log_failure() -> Failure:
    """A failed job whose log holds nothing: the real error is not in this log (a step that
    never started, a runner that went away, output not captured). Neither the change nor the
    environment is blamed on no evidence: the verdict is "not in the log", with the job's link."""
    return Failure(
        line="", line_no=1, message="the job failed and its log is empty", category="other",
        rule="empty-log", title="Failed job with an empty log: the real error is not in it",
        explanation="The job failed without writing any output: a step that never started, a runner "
                    "that went away, or output that was not captured.",
        suggestion="Open the job on the CI page for its steps' own status.",
        fingerprint=fingerprint("", "", "empty-log"), decided_by="empty-log", confidence=FALLBACK_CONFIDENCE,
        error_not_in_log=True,
    )


def fallback_failure(extractor: Extractor, job_name: str | None = None) -> Failure | None:
    """The most error-like line of the log's tail (the last one on ties), for a job that
    failed although no line matched; None for an empty log."""
    lines = extractor.tail_text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    best, best_score = None, -1
    for index, raw in enumerate(lines):
        line = clean_line(raw)
        if not line.strip():
            continue
        score = 10 * len(_ERRORISH.findall(line)) + min(len(line.strip()), 80) // 20
        if score >= best_score:
            best, best_score = index, score
    if best is None:
        return None
    best = _line_a_rule_knows(lines, job_name, best)
    line = clean_line(lines[best])
    failure = Failure(
        line=line,
        line_no=extractor.lines_read - (len(lines) - 1 - best),
        message=line.strip(),
        context=[clean_line(x) for x in lines[max(0, best - 3):best] + lines[best + 1:best + 4]],
        evidence=[clean_line(x) for x in lines[max(0, best - MAX_EVIDENCE_LINES):best] if x.strip()],
        fingerprint=fingerprint("", "", line),
    )
    apply_rules(failure, (), job_name, "fallback")
    if failure.rule == "unclassified":
        failure.rule = "fallback-line"
        failure.title = "Failed job: no known failure line; the most error-like line of its log"
        if best_score < 10 and not _ANY_TROUBLE.search(extractor.tail_text):
            # not one word of trouble in the whole tail: unless the model recognises the text
            # (a wrong answer, numbers that differ), the error is not in this log (decide.py)
            failure.rule = "quiet-log"
            failure.title = "Failed job: no line of its log reads as an error"
    return failure


def _line_a_rule_knows(lines: list[str], job_name: str | None, best: int) -> int:
    """The tail line a rule recognises (`manifest unknown`, a linter's `SC2086:`), the last of
    those of the highest priority; `best` (the most error-like line) when no rule knows one or
    only a generic (weak) rule does. A line's error words are no match for a rule that knows it."""
    start = max(0, len(lines) - FALLBACK_RULE_LINES)
    rules = default_rules()
    found, priority = best, None
    for index in range(len(lines) - 1, start - 1, -1):
        line = clean_line(lines[index])
        if not line.strip():
            continue
        match = match_rules(rules, Subject(primary=line, lines=(), message=line, job=job_name or ""))
        if match and match.rule.strength != "weak" and (priority is None or match.rule.priority > priority):
            found, priority = index, match.rule.priority
    return found


def to_failure(group: FailureGroup, job_name: str | None = None) -> Failure:
    """One Failure record from an extracted group, classified by the rule set."""
    best = group.stated()
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
    nearby = [line for line in best.neighbourhood if line not in evidence]
    failure.evidence = [line[:400] for line in (*evidence[:MAX_EVIDENCE_LINES], *nearby)]
    # the lines just around it, as the comment shows them: a generic reading may be made specific
    around = tuple(line for line in best.context if line not in evidence)
    apply_rules(failure, evidence, job_name, best.info.kind, nearby=around)
    return failure


def apply_rules(failure: Failure, evidence: tuple[str, ...] = (), job_name: str | None = None, kind: str = "",
                nearby: tuple[str, ...] = ()) -> None:
    """Fill category, rule, title, explanation, suggestion, owners and environment. When the
    failure's own lines say only something generic (no rule, a weak one, or one below
    NEARBY_BELOW: a crash, a bare exception, "a test failed"), the lines around it (`nearby`)
    may name what broke: a specific rule that knows one of them reads the failure instead."""
    names = test_names(failure.test or "", failure.line, *evidence)
    subject = Subject(
        primary=without_names(failure.line, names),
        lines=tuple(without_names(line, names) for line in evidence),
        message=failure.message,
        exception=failure.exception or "",
        test=failure.test or "",
        frames=tuple(f.file for f in failure.frames),
        job=job_name or "",
    )
    rules = default_rules()
    found = match_rules(rules, subject)
    if nearby and (found is None or found.rule.strength == "weak" or found.rule.priority < NEARBY_BELOW):
        floor = -1 if found is None else found.rule.priority
        wider = match_rules([r for r in rules if r.priority > floor and r.strength != "weak"],
                            replace(subject, lines=(*subject.lines, *(without_names(line, names) for line in nearby))))
        found = wider or found
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
        failure.error_not_in_log = rule.wrapper_only
        failure.owners = owners_of(rule.owners, failure.frames)
    if not failure.owners:
        failure.owners = owners_of((), failure.frames)


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


def _looks_like_junit(head: str) -> bool:
    start = head.lstrip("\ufeff \t\r\n")
    return start.startswith("<?xml") and "<testsuite" in head or start.startswith(("<testsuites", "<testsuite"))


def _classify_junit(text: str, job_name: str | None) -> list[Failure]:
    """One Failure per failed or errored test case; the case's own output picks the primary line."""
    failures: list[Failure] = []
    for case in read_junit(text):
        if case.outcome not in ("failed", "error"):
            continue
        body = "\n".join(part for part in (case.message, case.text) if part)
        inner = classify_blocks([body + "\n"], job_name=job_name, failed=True, use_model=False) if body.strip() else []
        if inner:
            failure = inner[0]
            failure.line_no = case.line_no
            failure.test = case.test_id
            failure.fingerprint = fingerprint(case.test_id, failure.exception or "", failure.message or failure.line)
            apply_rules(failure, tuple(failure.context), job_name)
        else:
            line = case.message or f"{case.outcome}: {case.test_id}"
            failure = Failure(line=line, line_no=case.line_no, test=case.test_id, message=case.message,
                              fingerprint=fingerprint(case.test_id, case.outcome, case.message))
            apply_rules(failure, (), job_name)
        failures.append(failure)
    add_opinions(failures, job_name)  # once the test ids are known: they are evidence too
    return sorted(failures, key=lambda f: f.line_no)  # the order the report lists them
