"""The labelled corpus of real failures: records, strict loading, and the split by thread.

A corpus file is JSON Lines, one record per line:

    {"id": "mb-0007", "source": "https://github.com/pytorch/executorch/issues/7946",
     "origin": "executorch issue", "excerpt": "...verbatim failure output...",
     "failure_line": "one line of the excerpt", "category": "mutable_buffer", "note": ""}

Records are split into training and evaluation parts *by source thread* (an issue or pull
request with all its comments, a file whatever its commit), so no thread has lines on both
sides. `thread_of` says what a thread is.
"""
from __future__ import annotations

import hashlib
import json
import re
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

from triage_rules.records import CATEGORIES

CORPUS_DIR = Path(__file__).resolve().parent.parent / "tests" / "engine" / "corpus"
TRAIN_FILE = CORPUS_DIR / "train.jsonl"
EVAL_FILE = CORPUS_DIR / "eval.jsonl"
# Real output of real broken code on the installed ExecuTorch (scripts/regression_records.py,
# scripts/pytest_records.py, ...), one file per way of producing it, training only: its sources
# are ExecuTorch files, never a thread of the evaluation split.
GENERATED_DIR = CORPUS_DIR / "generated"
UNTRAINED_DIR = CORPUS_DIR / "untrained"  # made here and measured, not trained on (its README says why)
REQUIRED = ("source", "excerpt", "failure_line", "category")
KNOWN = frozenset(REQUIRED) | {"id", "origin", "note"}

_GITHUB_THREAD = re.compile(r"^https?://github\.com/([^/]+/[^/]+)/(?:issues|pull|discussions)/(\d+)")
_GITHUB_FILE = re.compile(r"^https?://github\.com/([^/]+/[^/]+)/(?:blob|raw|tree)/[^/]+/(.+)$")
_GITHUB_RUN = re.compile(r"^https?://github\.com/([^/]+/[^/]+)/actions/runs/(\d+)")


class CorpusError(ValueError):
    """A corpus file is invalid; the message names the file and line."""


@dataclass(frozen=True)
class Record:
    id: str
    source: str
    excerpt: str
    failure_line: str
    category: str
    origin: str = ""
    note: str = ""

    @property
    def thread(self) -> str:
        return thread_of(self.source)

    @property
    def generated(self) -> bool:
        """Made on this machine from real broken code (generated/), not harvested from a thread."""
        return self.origin.startswith("generated")

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)


def generated_files() -> list[Path]:
    """The generated corpus files (`generated/*.jsonl`), in name order."""
    return sorted(GENERATED_DIR.glob("*.jsonl")) if GENERATED_DIR.is_dir() else []


def thread_of(source: str) -> str:
    """The thread a source URL belongs to: issue/PR numbers (comments and anchors dropped),
    a file's path without its commit, a CI run without its job, else the URL less its anchor."""
    url = source.strip().split("#", 1)[0].split("?", 1)[0].rstrip("/")
    for pattern, kind in ((_GITHUB_THREAD, "thread"), (_GITHUB_RUN, "run")):
        match = pattern.match(url)
        if match:
            return f"github:{match.group(1).lower()}:{kind}:{match.group(2)}"
    match = _GITHUB_FILE.match(url)
    if match:
        return f"github:{match.group(1).lower()}:file:{match.group(2)}"
    return re.sub(r"^https?://(www\.)?", "", url).lower()


def load_corpus(path: str | Path) -> list[Record]:
    """Every record of a JSONL corpus file, validated: an unknown category, a missing source,
    a failure line that is not a line of its excerpt, or a duplicate id is an error naming the
    file and line."""
    records: list[Record] = []
    seen: dict[str, int] = {}
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CorpusError(f"{path}: no such file") from None
    except UnicodeDecodeError as exc:
        raise CorpusError(f"{path}: not UTF-8 ({exc.reason})") from None
    for number, raw in enumerate(text.split("\n"), 1):
        if not raw.strip():
            continue
        where = f"{path}:{number}"
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise CorpusError(f"{where}: not JSON: {exc.msg}") from None
        record = _record(data, where, number)
        if record.id in seen:
            raise CorpusError(f"{where}: duplicate id {record.id!r} (first on line {seen[record.id]})")
        seen[record.id] = number
        records.append(record)
    return records


def _record(data: object, where: str, number: int) -> Record:
    if not isinstance(data, dict):
        raise CorpusError(f"{where}: a record is a JSON object")
    unknown = sorted(set(data) - KNOWN)
    if unknown:
        raise CorpusError(f"{where}: unknown key {unknown[0]!r}")
    for key in REQUIRED:
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise CorpusError(f"{where}: {key!r} is missing or empty")
    if not re.match(r"^https?://\S+$", data["source"]):
        raise CorpusError(f"{where}: source {data['source']!r} is not a URL")
    if data["category"] not in CATEGORIES:
        raise CorpusError(f"{where}: unknown category {data['category']!r}")
    if data["failure_line"] not in data["excerpt"].split("\n"):
        raise CorpusError(f"{where}: failure_line is not a line of the excerpt")
    for key in ("id", "origin", "note"):
        if key in data and not isinstance(data[key], str):
            raise CorpusError(f"{where}: {key!r} must be text")
    return Record(
        id=data.get("id") or f"line-{number}",
        source=data["source"].strip(),
        excerpt=data["excerpt"],
        failure_line=data["failure_line"],
        category=data["category"],
        origin=data.get("origin", ""),
        note=data.get("note", ""),
    )


def corpus_hash(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def split_by_thread(records: list[Record], eval_share: float = 0.22) -> tuple[list[Record], list[Record]]:
    """A deterministic split with whole threads on one side. Threads are visited in the order
    of a hash of their key; one goes to evaluation while any of its categories has less than
    `eval_share` of that category's records there (so every category is evaluated)."""
    by_thread: dict[str, list[Record]] = defaultdict(list)
    for record in records:
        by_thread[record.thread].append(record)
    totals = Counter(r.category for r in records)
    in_eval: Counter[str] = Counter()
    train: list[Record] = []
    evaluation: list[Record] = []
    for thread in sorted(by_thread, key=lambda t: hashlib.sha256(t.encode()).hexdigest()):
        group = by_thread[thread]
        wanted = any(in_eval[r.category] < eval_share * totals[r.category] for r in group)
        target = evaluation if wanted else train
        target.extend(group)
        if wanted:
            in_eval.update(r.category for r in group)
    return train, evaluation
