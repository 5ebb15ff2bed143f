"""A private PostgreSQL server for the tests when none listens on 127.0.0.1:5432, as
etriage/embedded_redis.py is for Redis: Debian's server binaries (`postgresql`, which
scripts/system-deps.sh installs), a throwaway cluster with trust authentication on a free port,
stopped and removed at the end. PostgreSQL refuses to run as root, so a root run starts it as
`nobody` (setpriv), in a directory that user owns."""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

START_SECONDS = 60


def server_binaries() -> Path | None:
    """The newest installed PostgreSQL's bin directory (initdb, postgres), or None."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name)
                   if p.parent.parent.name.isdigit() else 0)
    return found[-1].parent if found and (found[-1].parent / "postgres").exists() else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def private_postgres(bin_dir: Path) -> Iterator[str]:
    """Start a cluster from `bin_dir`; yield its SQLAlchemy URL; stop and remove it after."""
    root = Path(tempfile.mkdtemp(prefix="etriage-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        as_user = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
        shutil.chown(root, "nobody", "nogroup")
    data, port = root / "data", _free_port()
    server = None
    try:
        subprocess.run([*as_user, str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                        "--no-sync", "-E", "UTF8"], check=True, capture_output=True, timeout=START_SECONDS)
        server = subprocess.Popen([*as_user, str(bin_dir / "postgres"), "-D", str(data), "-h", "127.0.0.1",
                                   "-p", str(port), "-k", str(root), "-F", "-c", "fsync=off"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + START_SECONDS
        while True:
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the private PostgreSQL did not start (exit {server.poll()})")
            time.sleep(0.1)
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        if server is not None:  # SIGINT: PostgreSQL's fast shutdown, which ends open sessions
            server.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.wait(timeout=30)
            if server.poll() is None:
                server.kill()
        shutil.rmtree(root, ignore_errors=True)
