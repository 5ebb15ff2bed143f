"""Benchmark: webhook intake under load, side by side with a bare Flask app.

Both apps run under gunicorn with the Procfile's settings (2 workers, 4 threads); a separate
load process (wrk, 1 thread, 16 connections) posts signed `pull_request.synchronize`
deliveries (GitHub's real payload, about 28 kB, for many different PRs, each with a fresh
delivery id) to etriage, and the same bodies to a bare Flask app that answers 204 without
reading them. Real Redis (embedded, or $REDIS_URL) behind etriage; its queued messages are
not consumed. Prints requests/s and latency percentiles of both and their ratio; asserts
nothing.

    .venv/bin/python bench/webhook_load.py [--seconds 10] [--prs 200]
"""
from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import re
import shutil
import statistics
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from etriage.embedded_redis import EmbeddedRedis  # noqa: E402

PAYLOAD = ROOT / "etriage" / "dev" / "fixtures" / "github" / "webhooks" / "pull_request" / "opened.json"
SECRET = "bench-secret"
GUNICORN = ["--workers", "2", "--threads", "4", "--timeout", "30"]  # the Procfile's web line
BARE_APP = '''
from flask import Flask
app = Flask(__name__)

@app.post("/webhook")
def webhook():
    return "", 204
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lua_script(prs: int) -> str:
    """wrk's request generator: one signed body per PR, a new delivery id per request."""
    payload = json.loads(PAYLOAD.read_text())
    payload["action"] = "synchronize"
    bodies = []
    for number in range(1, prs + 1):
        payload["number"] = payload["pull_request"]["number"] = 10_000 + number
        payload["pull_request"]["head"]["sha"] = hashlib.sha1(str(number).encode()).hexdigest()
        body = json.dumps(payload)
        signature = "sha256=" + hmac.new(SECRET.encode(), body.encode(), hashlib.sha256).hexdigest()
        bodies.append((body, signature))
    entries = ",\n".join(f"{{{json.dumps(b)}, {json.dumps(s)}}}" for b, s in bodies)
    return f'''
local bodies = {{
{entries}
}}
local n = 0
request = function()
  n = n + 1
  local item = bodies[(n % #bodies) + 1]
  local headers = {{}}
  headers["Content-Type"] = "application/json"
  headers["X-GitHub-Event"] = "pull_request"
  headers["X-GitHub-Delivery"] = string.format("bench-%d-%d-%d", os.time(), math.random(1, 1000000000), n)
  headers["X-Hub-Signature-256"] = item[2]
  return wrk.format("POST", "/webhook", headers, item[1])
end
'''


def start_gunicorn(app: str, port: int, env: dict, cwd: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "gunicorn", app, "--bind", f"127.0.0.1:{port}", *GUNICORN,
                             "--log-level", "warning"], cwd=cwd, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return proc
        except urllib.error.HTTPError:
            return proc  # it answers (the bare app has no /healthz): up
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"gunicorn {app} exited: {proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.2)
    raise SystemExit(f"gunicorn {app} did not start")


def wrk(port: int, script: Path, seconds: int) -> dict:
    out = subprocess.run(["wrk", "-t1", "-c16", f"-d{seconds}s", "--latency", "-s", str(script),
                          f"http://127.0.0.1:{port}/webhook"], capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))

    def ms(label):
        found = re.search(rf"^\s+{label}%\s+([\d.]+)(us|ms|s)\b", out, re.M)
        value, unit = float(found.group(1)), found.group(2)
        return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value

    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"rps": rps, "p50": ms(50), "p99": ms(99), "non_2xx": int(non2xx.group(1)) if non2xx else 0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--prs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternate the two apps this many times; medians are reported (a busy machine "
                             "changes between rounds, not within one pair)")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        print("bench/webhook_load.py needs wrk (`apt-get install wrk`; scripts/system-deps.sh installs it)",
              file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="etriage-bench-load-"))
    (work / "bare_app.py").write_text(BARE_APP)
    script = work / "deliveries.lua"
    script.write_text(lua_script(args.prs))
    with EmbeddedRedis() as embedded:
        redis_url = os.environ.get("REDIS_URL") or embedded
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(work),
               "PYTHONPATH": str(ROOT), "REDIS_URL": redis_url, "ETRIAGE_WEBHOOK_SECRET": SECRET,
               "ETRIAGE_GITHUB_TOKEN": "bench", "ETRIAGE_DATA_DIR": str(work / "data")}
        apps = {"bare Flask, 204": "bare_app:app", "etriage webhook": "bot.wsgi:app"}
        procs, ports, rounds = {}, {}, {name: [] for name in apps}
        try:
            for name, app in apps.items():
                ports[name] = free_port()
                procs[name] = start_gunicorn(app, ports[name], env, work)
                wrk(ports[name], script, 2)  # warm-up: imports, connections, the broker
            for _ in range(args.rounds):
                for name in apps:
                    rounds[name].append(wrk(ports[name], script, args.seconds))
        finally:
            for proc in procs.values():
                proc.terminate()
                proc.wait(timeout=30)
        results = {name: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
                   for name, runs in rounds.items()}
    print(f"wrk -t1 -c16 -d{args.seconds}s x {args.rounds} rounds alternating (medians), {args.prs} PRs, {PAYLOAD.stat().st_size // 1000} kB deliveries, "
          f"gunicorn {' '.join(GUNICORN)}")
    for name, r in results.items():
        print(f"{name:18} {r['rps']:8.0f} requests/s  p50 {r['p50']:.1f} ms  p99 {r['p99']:.1f} ms"
              + (f"  non-2xx {r['non_2xx']}" if r["non_2xx"] else ""))
    bare, ours = results["bare Flask, 204"], results["etriage webhook"]
    pairs = [e["rps"] / b["rps"] for b, e in zip(rounds["bare Flask, 204"], rounds["etriage webhook"])]
    print(f"ratio etriage / bare: {ours['rps'] / bare['rps']:.2f} (per round: {', '.join(f'{r:.2f}' for r in pairs)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
