"""Stable failure fingerprints: the failure text with volatile tokens normalised away, hashed.

The same failure must hash the same in another job, push or PR: timestamps, temp paths,
hex ids, shas, durations, line numbers and other counters differ between runs and are
replaced by placeholders before hashing.
"""
from __future__ import annotations

import hashlib
import re

from triage_rules.readers import ANSI_RE, TIMESTAMP_RE

# Order matters: the specific shapes first, then the generic number catch-all.
_SUBSTITUTIONS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?Z?"), "<ts>"),
    (re.compile(r"\b\d\d:\d\d:\d\d(?:\.\d+)?\b"), "<time>"),
    (re.compile(r"\b[0-9a-f]{40}\b|\b[0-9a-f]{64}\b"), "<sha>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I), "<uuid>"),
    (re.compile(r"(?:/private)?/(?:tmp|var/folders|dev/shm)/[^\s'\":,)\]]*|[A-Za-z]:\\[^\s]*\\Temp\\[^\s'\"]*"), "<tmp>"),
    (re.compile(r"(?<![<\w])(?:pytest-of-\w+|pytest-\d+|tmp[a-z0-9_]{5,})\b"), "<tmp>"),
    (re.compile(r"/(?:home|Users)/[^/\s]+/(?:work|runner/_work|actions-runner[^/\s]*/_work)/"), "<work>/"),
    (re.compile(r"/__w/|/var/lib/jenkins/(?:workspace/)?|/opt/conda/envs/[^/\s]+/|/opt/python-[\d.]+-venv/"), "<root>/"),
    (re.compile(r"\b0x[0-9a-fA-F]{6,}\b"), "<addr>"),
    (re.compile(r"\bgw\d+\b"), "gw<n>"),  # pytest-xdist's worker: whichever ran the test
    (re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|s|sec|seconds?|min|minutes?|h|hours?|[KMGT]i?B)\b"), "<dur>"),
    (re.compile(r"(?<![A-Za-z0-9])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{12,}(?![A-Za-z0-9])"), "<hex>"),
    (re.compile(r"(?<![A-Za-z0-9.])\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![A-Za-z0-9])"), "<n>"),
    (re.compile(r"\s+"), " "),
]


def normalise(text: str) -> str:
    """`text` with timestamps, ANSI codes, temp paths, shas, hex ids, timings and numbers replaced."""
    text = ANSI_RE.sub("", TIMESTAMP_RE.sub("", text))
    for pattern, placeholder in _SUBSTITUTIONS:
        text = pattern.sub(placeholder, text)
    return text.strip()


def fingerprint(*parts: str | None) -> str:
    """A short stable hash of the normalised parts (None and empty parts count as empty)."""
    joined = "\x1f".join(normalise(p or "") for p in parts)
    return hashlib.sha256(joined.encode("utf-8", "replace")).hexdigest()[:16]
