"""The dashboard's fixtures: a Store + History on SQLite and on PostgreSQL (own table prefix)."""
from __future__ import annotations

import uuid

import pytest

from bot.history import History
from bot.store import Store


@pytest.fixture(params=["sqlite", "postgresql"])
def history(request, tmp_path):
    if request.param == "sqlite":
        store = Store(f"sqlite:///{tmp_path / 'etriage.db'}")
    else:
        store = Store(request.getfixturevalue("postgres_url"), prefix=f"t{uuid.uuid4().hex[:10]}_")
    yield History(store)
    store.drop_all()
