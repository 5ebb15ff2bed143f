"""How make test shares the suite out among pytest-xdist's workers (tests/conftest.py)."""
from __future__ import annotations

from collections import OrderedDict
from types import SimpleNamespace

import pytest

from tests import conftest


def test_a_module_is_one_unit_and_the_machine_wide_modules_are_one_together():
    scope = conftest.worker_scope
    assert scope("tests/web/test_repro.py::test_x[a-b]") == scope("tests/web/test_repro.py::test_y") == "tests/web/test_repro.py"
    assert scope("tests/web/test_mutes.py::test_x") != scope("tests/web/test_repro.py::test_x")
    assert {scope("tests/native/test_native_build.py::t"), scope("tests/native/test_native_triage.py::t"),
            scope("tests/devices/test_emulated_arm64.py::t")} == {"machine-wide"}
    assert scope("tests/devices/test_android.py::t") == "tests/devices/test_android.py"


def test_a_test_using_a_machine_wide_place_outside_those_modules_stops_the_collection():
    config = SimpleNamespace(getoption=lambda name: True)
    stray = SimpleNamespace(nodeid="tests/web/test_new.py::test_builds", fixturenames=["tmp_path", "native_data"])
    placed = SimpleNamespace(nodeid="tests/native/test_new.py::test_builds", fixturenames=["native_data"])
    conftest.pytest_collection_modifyitems(config, [placed])  # no error
    with pytest.raises(pytest.UsageError, match="tests/web/test_new.py::test_builds"):
        conftest.pytest_collection_modifyitems(config, [placed, stray])


def test_the_long_units_are_handed_out_first_in_their_order_and_the_rest_keep_theirs():
    queue = OrderedDict((scope, {}) for scope in ("tests/web/test_a.py", "tests/service/test_serve.py", "tests/b.py",
                                                  "machine-wide", "tests/pipeline/test_triage.py"))
    conftest.long_first(queue)
    assert list(queue) == ["tests/pipeline/test_triage.py", "machine-wide", "tests/service/test_serve.py",
                           "tests/web/test_a.py", "tests/b.py"]
