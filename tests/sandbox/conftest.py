"""Fixtures for the sandbox tests: the GitHub API double a hostile run must not reach."""
from __future__ import annotations

import pytest

from etriage.dev.github_double import GitHubDouble


@pytest.fixture
def double():
    with GitHubDouble() as github:
        yield github
