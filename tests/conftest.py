"""Suite-wide options. Area fixtures live in each area's own conftest.py."""
from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
# ../shared sits beside the clone, both here and in CI.
SHARED = REPO_ROOT.parent / "shared"


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", help="also run long fuzzing/load tests")


# make test runs the suite on pytest-xdist's workers. Each module goes to one worker as a whole,
# so its module-scoped fixtures are set up once; and the modules that share a machine-wide place
# go to one worker together, one after another: the native build folders and compiler cache
# (~/.cache/etriage/test-native), the arm64 userland, binfmt_misc. The controller sees test ids
# only, so those modules are named here; collection fails if a test elsewhere uses those places.
MACHINE_WIDE = ("tests/native/", "tests/devices/test_emulated_arm64.py", "tests/devices/test_arm64_userland.py")
SHARED_PLACES = {"native_data", "source_repo", "binfmt", "arm64_userland"}


# The units that take minutes (measured 6 December on 2 workers: test_triage.py about 5 min, the
# machine-wide group about 3 min cold), handed out first so that none of them is what one worker
# starts while the other is nearly done; the rest follow in xdist's order (most tests first).
LONG_FIRST = ("tests/pipeline/test_triage.py", "machine-wide", "tests/probes/test_regressions.py",
              "tests/pipeline/test_selection_bench.py", "tests/environments/test_moved_tree.py",
              "tests/service/test_serve.py")


def long_first(workqueue) -> None:
    """Move LONG_FIRST's units, in that order, to the front of xdist's work queue (an OrderedDict)."""
    for scope in reversed(LONG_FIRST):
        if scope in workqueue:
            workqueue.move_to_end(scope, last=False)


def worker_scope(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    return "machine-wide" if path.startswith(MACHINE_WIDE) else path


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's, when it is installed
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") not in ("load", "loadscope"):
        return None  # a mode chosen on the command line (each, worksteal, ...) is xdist's own
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return worker_scope(nodeid)

        def _assign_work_unit(self, node) -> None:
            long_first(self.workqueue)
            super()._assign_work_unit(node)

    return ModuleScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    strays = [item.nodeid for item in items if SHARED_PLACES & set(getattr(item, "fixturenames", ()))
              and worker_scope(item.nodeid) != "machine-wide"]
    if strays:
        raise pytest.UsageError(f"tests use a machine-wide place outside tests/conftest.py's MACHINE_WIDE: {strays[:5]}")
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="long run; use --run-slow (make test-slow)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.fail(f"expected the read-only shared/ folder at {SHARED}")
    return SHARED


@pytest.fixture(scope="session")
def redis_url():
    """A real Redis: $REDIS_URL when set, else a private redis-server for this session."""
    import os

    url = os.environ.get("REDIS_URL")
    if url:
        yield url
        return
    from etriage.embedded_redis import EmbeddedRedis

    with EmbeddedRedis() as url:
        yield url


@pytest.fixture(scope="session")
def postgres_url():
    """A real PostgreSQL: $ETRIAGE_TEST_POSTGRES_URL, else the local trust-auth server if up, else
    a private server of this session from Debian's binaries (tests/private_postgres.py), as
    `redis_url` starts its own Redis. ETRIAGE_TEST_POSTGRES=private skips the local server."""
    import os
    import socket

    from tests.private_postgres import private_postgres, server_binaries

    def local_server() -> bool:
        try:
            socket.create_connection(("127.0.0.1", 5432), timeout=0.5).close()
        except OSError:
            return False
        return True

    url = os.environ.get("ETRIAGE_TEST_POSTGRES_URL")
    if url:
        yield url
        return
    if os.environ.get("ETRIAGE_TEST_POSTGRES") != "private" and local_server():
        yield "postgresql+psycopg://postgres@127.0.0.1:5432/test"
        return
    binaries = server_binaries()
    if binaries is None:
        pytest.skip("no PostgreSQL on 127.0.0.1:5432, none installed to start (scripts/system-deps.sh "
                    "installs Debian's postgresql) and ETRIAGE_TEST_POSTGRES_URL unset")
    with private_postgres(binaries) as private:
        yield private


@pytest.fixture
def unused_redis_url() -> str:
    """A port nothing listens on: connections are refused at once, like a Redis that is down."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"
