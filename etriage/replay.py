"""`etriage replay PAYLOAD.json --event pull_request`: sign a webhook payload and POST it.

The bytes of the file are sent unchanged (the signature covers the raw body). The URL and the
secret default to what a running `etriage serve` wrote into its data directory.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import sys
import uuid
from pathlib import Path

import requests

from etriage.serve import SECRET_FILE, URL_FILE


def add_arguments(parser) -> None:
    parser.add_argument("payload", type=Path, help="webhook body (JSON), sent byte for byte")
    parser.add_argument("--event", required=True, help="X-GitHub-Event, e.g. pull_request")
    parser.add_argument("--url", help="webhook URL (default: the one `etriage serve` wrote)")
    parser.add_argument("--secret", help="webhook secret (default: the one `etriage serve` wrote)")
    parser.add_argument("--delivery", help="X-GitHub-Delivery (default: a new UUID)")
    parser.add_argument("--data-dir", type=Path, help="default: $ETRIAGE_DATA_DIR or ~/.etriage")


def sign(body: bytes, secret: str) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def send(url: str, secret: str, event: str, body: bytes, delivery: str | None = None,
         timeout: float = 30.0) -> requests.Response:
    headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
               "X-Hub-Signature-256": sign(body, secret), "Content-Type": "application/json",
               "User-Agent": "GitHub-Hookshot/etriage-replay"}
    return requests.post(url, data=body, headers=headers, timeout=timeout)


def run(args) -> int:
    data_dir = Path(args.data_dir or os.environ.get("ETRIAGE_DATA_DIR")
                    or Path.home() / ".etriage").expanduser()
    try:
        body = args.payload.read_bytes()
        json.loads(body)
    except OSError as error:
        return _fail(f"cannot read {args.payload}: {error.strerror}")
    except ValueError as error:
        return _fail(f"{args.payload} is not JSON: {error}")
    url = args.url or _read(data_dir / URL_FILE, "--url")
    secret = args.secret or os.environ.get("ETRIAGE_WEBHOOK_SECRET") or _read(
        data_dir / SECRET_FILE, "--secret")
    if url is None or secret is None:
        return 2
    try:
        response = send(url, secret, args.event, body, args.delivery)
    except requests.RequestException as error:
        return _fail(f"cannot reach {url}: {type(error).__name__} (is `etriage serve` running?)")
    print(f"{response.status_code} {response.text.strip()}")
    return 0 if response.status_code < 300 else 1


def _read(path: Path, option: str) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        print(f"etriage replay: no {path.name} in {path.parent}; start `etriage serve` or pass "
              f"{option}", file=sys.stderr)
        return None


def _fail(message: str) -> int:
    print(f"etriage replay: {message}", file=sys.stderr)
    return 2
