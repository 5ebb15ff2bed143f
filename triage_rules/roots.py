"""One root cause, one entry: the keys that make failures of one run the same failure.

Two failures are one root when they share any key (the run joins keys transitively):

    exact   the exception's name and the message with volatile parts normalised
            (`fingerprint.normalise`): a pytest summary line and its traceback, the same
            failure in 5 tests or 3 jobs
    frame   the innermost frame (file name and function) with the exception's name and the
            message's shape, its quoted and bracketed names masked: one raise site that named
            another submodule or buffer (`got a class 'fused_first_tag1'` and `'fused_Second…'`)
    probe   an etriage probe's failure ("ProbeFailure: [category] what it lowered: where:
            problem: details"): its category and the problem's kind, whatever program it lowered
            and wherever along the way it was seen

A failure with no message has its fingerprint as its only key. An environment failure's keys
also hold its title, which names what the environment lacks (`Backend {backend} is not
registered`): one message from two missing backends is two environment problems.
"""
from __future__ import annotations

import re
from pathlib import PurePath

from triage_rules.fingerprint import fingerprint, normalise
from triage_rules.records import Failure

_PROBE = re.compile(r"ProbeFailure: \[(?P<category>\w+)\] (?P<statement>.+)")
# Where along a probe's way a problem was seen, dropped before the problem's own words: a step
# ("after delegate lowering", "at runtime step 2/3"), a method ("method 'decode'", "prefill"),
# a stage or flow made of the pipeline's words ("FP to_executorch", "memory planning/emission",
# "export -> to_edge -> constant_prop_pass -> to_executorch (portable)").
_STAGE = (r"(?:FP|quantized|QNN|HTP|portable|export|to_edge|lower|lowering|delegate|to_executorch|memory"
          r"|planning|emission|runtime|constant|propagation|passes|flow|\w+_pass)")
_WHERE = re.compile(
    r"(?:after|at|in) [^:]+"
    r"|method '[^']*'"
    r"|\w+"
    rf"|{_STAGE}(?:(?:\s*(?:->|[/+])\s*|\s+){_STAGE})*(?:\s*\([^)]*\))?"
)
# The names a message shape does not keep: quoted, bracketed and parenthesised parts, and
# snake_case identifiers (buffers, submodules, nodes).
_NAMES = re.compile(r"'[^']*'|\"[^\"]*\"|\[[^\]]*\]|\([^)]*\)|\b[A-Za-z]\w*_\w*\b")


def shape(text: str) -> str:
    """The text with volatile parts normalised and names masked."""
    return re.sub(r"\s+", " ", _NAMES.sub("<name>", normalise(text))).strip()


def probe_problem(statement: str) -> str:
    """The problem's kind in a probe's statement: past the probe's headline (what it lowered)
    and the places it names, its first clause, names masked."""
    parts = [p.strip() for p in statement.split(": ")]
    rest = parts[1:] or parts
    while len(rest) > 1 and _WHERE.fullmatch(rest[0]):
        rest = rest[1:]
    return shape(re.split(r" \(|; ", rest[0], maxsplit=1)[0])


def root_keys(failure: Failure) -> list[str]:
    """The keys under which this failure is one root with others (see the module's text)."""
    probe = _PROBE.search(failure.line or "")
    if probe:
        return [fingerprint("probe", probe["category"], probe_problem(probe["statement"]))]
    message = (failure.message or "").strip()
    if not message:
        return [failure.fingerprint]
    exception = (failure.exception or "").rsplit(".", 1)[-1]
    keys = [fingerprint("root", exception, normalise(message))]
    if failure.frames:
        innermost = failure.frames[-1]
        where = f"{PurePath(innermost.file.replace(chr(92), '/')).name}:{innermost.function}"
        keys.append(fingerprint("frame", where, exception, shape(message)))
    if failure.environment and failure.title:
        keys = [fingerprint("environment", key, failure.title) for key in keys]
    return keys
