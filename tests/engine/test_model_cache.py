"""The learned model's cache: trained once, reused, and rebuilt when missing or corrupt."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from triage_rules.corpus import TRAIN_FILE


def classify(env: dict, stdin: bytes) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "etriage.cli", "classify", "--format", "json", "-"], input=stdin,
                          capture_output=True, timeout=300, env=env, check=False)


def test_missing_then_corrupt_cache_is_rebuilt_never_a_crash(tmp_path):
    small = tmp_path / "small.jsonl"  # a small corpus keeps training to a second or two
    lines = TRAIN_FILE.read_text(encoding="utf-8").splitlines()
    small.write_text("\n".join(lines[::6]) + "\n", encoding="utf-8")
    cache = tmp_path / "cache"
    env = {**os.environ, "ETRIAGE_MODEL_CACHE": str(cache), "ETRIAGE_CORPUS": str(small)}
    log = b"error: device 'emulator-5554' offline\n"

    first = classify(env, log)  # no cache yet: trained and stored
    assert first.returncode == 0, first.stderr
    [stored] = list(cache.glob("model-*.npz"))
    size = stored.stat().st_size
    assert size > 1000

    # from the cache, scoring imports neither scikit-learn nor scipy (the fast start, issue 21)
    probe = ("import sys, json\nfrom triage_rules.engine import classify_text\n"
             "[f] = classify_text(sys.stdin.read())\n"
             "print(json.dumps([f.decided_by, sorted(m for m in ('sklearn', 'scipy') if m in sys.modules)]))")
    cached = subprocess.run([sys.executable, "-c", probe], input=log, capture_output=True, timeout=300, env=env,
                            check=False)
    assert cached.returncode == 0, cached.stderr
    assert json.loads(cached.stdout) == [json.loads(first.stdout)["failures"][0]["decided_by"], []]

    stored.write_bytes(b"not an npz at all")  # corrupt
    second = classify(env, log)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout) == json.loads(first.stdout)  # same answer: training is deterministic
    assert stored.stat().st_size == size  # rebuilt in place

    small.write_text("\n".join(lines[1::6]) + "\n", encoding="utf-8")  # another corpus: another key
    third = classify(env, log)
    assert third.returncode == 0, third.stderr
    assert len(list(cache.glob("model-*.npz"))) == 2
    assert json.loads(third.stdout)["failures"][0]["decided_by"]
