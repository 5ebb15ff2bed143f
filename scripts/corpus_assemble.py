"""Assemble the labelled corpus from collectors' part files and split it by source thread.

    python scripts/corpus_assemble.py PART.jsonl... --out tests/engine/corpus

Each part is JSON Lines in the corpus record format (see triage_rules/corpus.py). Records get
stable ids `<part name>-<n>`; an excerpt that appears twice is kept once; a record that fails
validation stops the run with its file and line. The split puts whole threads on one side
(triage_rules.corpus.split_by_thread) and writes train.jsonl and eval.jsonl.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from triage_rules.corpus import CorpusError, load_corpus, split_by_thread  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    records, seen = [], set()
    for part in args.parts:
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as staged:
            for number, line in enumerate(part.read_text(encoding="utf-8").splitlines(), 1):
                if line.strip():
                    data = json.loads(line)
                    data["id"] = f"{part.stem}-{number:04d}"
                    staged.write(json.dumps(data, ensure_ascii=False) + "\n")
        try:
            loaded = load_corpus(staged.name)
        except CorpusError as exc:
            print(f"{part}: {exc}", file=sys.stderr)
            return 1
        for record in loaded:
            key = " ".join(record.excerpt.split())
            if key not in seen:
                seen.add(key)
                records.append(record)
    train, evaluation = split_by_thread(records)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, part in (("train.jsonl", train), ("eval.jsonl", evaluation)):
        (args.out / name).write_text("".join(r.to_json() + "\n" for r in part), encoding="utf-8")
    counts = Counter(r.category for r in records)
    eval_counts = Counter(r.category for r in evaluation)
    print(f"{len(records)} records, {len({r.thread for r in records})} threads: "
          f"train {len(train)}, eval {len(evaluation)} ({len(evaluation) / len(records):.0%})")
    for category, n in counts.most_common():
        print(f"  {category:24} {n:4}  eval {eval_counts[category]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
