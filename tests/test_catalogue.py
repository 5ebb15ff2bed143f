"""One catalogue: the repo config, the queues and the planner name suites, targets and labels
alike (triage_rules/tables/*.yaml)."""
from __future__ import annotations

from bot import queues
from bot.repo_config import DEFAULT_LABELS, DEFAULT_SUITES, DEFAULT_TARGETS
from tasks.pipeline.tables import load_tables
from triage_rules import catalogue
from triage_rules.records import CATEGORIES


def test_the_repo_config_knows_the_planners_suites_by_the_same_names():
    tables = load_tables()
    assert set(DEFAULT_SUITES) == set(tables.suites)
    assert all(DEFAULT_SUITES[name].description == suite.description and suite.description
               for name, suite in tables.suites.items())


def test_every_target_has_a_queue_and_devices_go_to_the_device_queue():
    tables = load_tables()
    assert set(tables.targets) <= set(DEFAULT_TARGETS)
    for name, target in catalogue.targets().items():
        assert target.queue in queues.QUEUES, name
    assert queues.target_queue("host") == "build" and queues.target_queue("qnn-sim") == "emulator"
    devices = [name for name, t in DEFAULT_TARGETS.items() if t.kind == "device"]
    assert devices and all(queues.target_queue(name) == "device" and DEFAULT_TARGETS[name].soc for name in devices)


def test_every_category_has_a_default_label():
    assert set(DEFAULT_LABELS) == set(CATEGORIES)
    assert len(set(DEFAULT_LABELS.values())) == len(CATEGORIES)
