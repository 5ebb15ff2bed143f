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
    assert queues.target_queue("host") == "build" and queues.target_queue("qnn-htp-sim") == "emulator"
    devices = [name for name, t in DEFAULT_TARGETS.items() if t.kind == "device"]
    assert devices and all(queues.target_queue(name) == "device" and DEFAULT_TARGETS[name].soc for name in devices)


def test_every_category_has_a_default_label():
    assert set(DEFAULT_LABELS) == set(CATEGORIES)
    assert len(set(DEFAULT_LABELS.values())) == len(CATEGORIES)


# ---- the table files' models: every mistake is reported with file, line and a clear message ----

import shutil  # noqa: E402

import pytest  # noqa: E402

from tasks.pipeline.tables import TableError  # noqa: E402


def test_every_shipped_table_file_loads_with_its_model():
    for name in catalogue.MODELS:
        assert catalogue.read_table(name), name
    assert catalogue.read_table("suites.yaml").selection.budget_seconds == 60  # an int stays an int


# (file, text to find, what replaces it, the line's marker, expected "where: message")
TABLE_MISTAKES = [
    ("suites.yaml", "    estimated_seconds: 11\n", "    estimated_second: 11\n", "estimated_second:",
     "suites.multi_method: unknown key 'estimated_second' (did you mean 'estimated_seconds'?)"),
    ("suites.yaml", "    estimated_seconds: 11\n", "    estimated_seconds: fast\n", "estimated_seconds: fast",
     "suites.multi_method.estimated_seconds: must be a number"),
    ("suites.yaml", "    estimated_seconds: 11\n", "    estimated_seconds: -1\n", "estimated_seconds: -1",
     "suites.multi_method.estimated_seconds: must be a number of seconds, 0 or more"),
    ("suites.yaml", "  budget_seconds: 60\n", "  budget_seconds: 0\n", "budget_seconds: 0",
     "selection.budget_seconds: must be a positive number of seconds"),
    ("suites.yaml", "  max_files: 4\n", "  max_files: 4.5\n", "max_files: 4.5",
     "selection.max_files: must be an integer"),
    ("suites.yaml", "    kind: probes\n", "    kind: probe\n", "kind: probe",
     "suites.probes.kind: 'probe' is not one of pytest, probes, qnn, selected, cxx (did you mean 'probes'?)"),
    ("suites.yaml", "    backends: [portable, xnnpack]\n", "    backends: portable\n", "backends: portable",
     "suites.index_put.backends: must be a list"),
    ("recipes.yaml", "    kind: overlay\n", "    kind: overlay\n    enabled: yes please\n", "enabled: yes please",
     "recipes.overlay.enabled: must be true or false"),
    ("recipes.yaml", '    inputs: ["*.py"', '    input: ["*.py"', "input:",
     "recipes.overlay: unknown key 'input' (did you mean 'inputs'?)"),
    ("targets.yaml", "    suite_kinds: [qnn]\n", "    suite_kinds: [qnn, unit]\n", "suite_kinds: [qnn, unit]",
     "targets.qnn-htp-sim.suite_kinds[1]: 'unit' is not one of pytest, probes, qnn, selected, cxx"),
    ("targets.yaml", "    soc: SM8650\n", "", "android-sm8650:",
     "devices.android-sm8650: missing required key 'soc'"),
    ("areas.yaml", "    backends: from_path\n", "    backends: from_paths\n", "backends: from_paths",
     "areas[3].backends: must be a list, 'all' or 'from_path'"),
    ("areas.yaml", "  mutable_buffer: [", "  mutable_buffers: [", "mutable_buffers:",
     "category_paths.mutable_buffers: 'mutable_buffers' is not one of"),
    ("labels.yaml", 'lint: "triage: lint"', 'lint: ["triage: lint"]', "lint:", "lint: must be a string"),
    ("labels.yaml", 'lint: "triage: lint"', 'lint: "a"\nlint: "b"', 'lint: "b"', "lint: duplicate key 'lint'"),
    ("targets.yaml", "targets:\n", "targets: !!python/object/apply:os.getcwd\n", "targets:",
     "targets: must be a mapping"),
]


@pytest.mark.parametrize("file, old, new, marker, expected", TABLE_MISTAKES, ids=[m[4][:50] for m in TABLE_MISTAKES])
def test_each_table_mistake_names_file_line_and_what(tmp_path, file, old, new, marker, expected):
    tables = tmp_path / "tables"
    shutil.copytree(catalogue.TABLES, tables)
    text = (tables / file).read_text()
    assert old in text, f"{file} no longer holds {old!r}: update this case"
    text = text.replace(old, new, 1)
    (tables / file).write_text(text)
    line = next(n for n, content in enumerate(text.splitlines(), 1) if marker in content)
    with pytest.raises(TableError) as error:
        catalogue.read_table(file, tables)
    assert f"{tables / file}:{line}: {expected}" in str(error.value)
    assert "\n" not in str(error.value)


def test_a_missing_or_broken_table_file_is_a_clear_error(tmp_path):
    with pytest.raises(TableError, match=r"suites\.yaml: table file missing"):
        catalogue.read_table("suites.yaml", tmp_path)
    (tmp_path / "suites.yaml").write_text("suites:\n  a: [unclosed\n")
    with pytest.raises(TableError, match=r"suites\.yaml:3: not valid YAML: while parsing a flow sequence"):
        catalogue.read_table("suites.yaml", tmp_path)
