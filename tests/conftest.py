"""Suite-wide options. Area fixtures live in each area's own conftest.py."""
from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
# ../shared sits beside the clone, both here and in CI.
SHARED = REPO_ROOT.parent / "shared"


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", help="also run long fuzzing/load tests")


def pytest_collection_modifyitems(config, items):
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
