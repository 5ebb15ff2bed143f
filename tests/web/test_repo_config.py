"""`.github/etriage.yml`: sections, defaults, errors with line numbers, and the cache."""
from __future__ import annotations

import textwrap

import pytest

from bot.repo_config import (DEFAULT_LABELS, RepoConfig, RepoConfigCache, RepoConfigError, Target, load,
                             validate_repo_config)

FULL = textwrap.dedent("""\
    triage:
      suites: [multi_method, my_suite]
      targets: [host, android-sm8750-lab]
      paths:
        "third-party/qnn/**": qualcomm
        "exir/backend/**": qualcomm
    commands: {}
    labels:
      multi_method_lowering: "qnn: multi-method"
    ci_logs:
      workflows: [pull, trunk]
      max_bytes: 1048576
    devices:
      targets: [android-sm8750-lab]
    suites:
      my_suite:
        description: the lab's own
        tests: ["backends/qualcomm/tests/test_qnn_delegate.py::TestQNNQuantizedUtils"]
      bare_suite:
    targets:
      android-sm8750-lab: {kind: device, soc: SM8750}
      x86-sim: {kind: emulator}
    """)


def test_full_config():
    config = load(FULL)
    assert config.triage.suites == ("multi_method", "my_suite")
    assert config.triage.targets == ("host", "android-sm8750-lab")
    assert dict(config.triage.paths) == {"third-party/qnn/**": "qualcomm", "exir/backend/**": "qualcomm"}
    assert config.commands is not None
    assert config.labels["multi_method_lowering"] == "qnn: multi-method"
    assert config.labels["mutable_buffer"] == "triage: mutable-buffer"  # defaults fill the rest
    assert "qnn: multi-method" in config.allowed_labels()
    assert config.ci_logs.workflows == ("pull", "trunk") and config.ci_logs.max_bytes == 1048576
    assert config.device_targets() == {"android-sm8750-lab"}
    assert set(config.suites) == {"multi_method", "mutable_buffer", "index_put", "probes", "qnn_probes", "qnn", "selected",
                                  "cxx_tests", "my_suite", "bare_suite"}  # the catalogue's, then the file's
    assert config.suites["my_suite"].tests == ("backends/qualcomm/tests/test_qnn_delegate.py::TestQNNQuantizedUtils",)
    assert config.targets["android-sm8750-lab"] == Target("android-sm8750-lab", "device", "SM8750")
    assert config.targets["x86-sim"].kind == "emulator"
    assert validate_repo_config(FULL) == []


def test_trusted_logins_are_kept_and_matched_without_case():
    config = load("triage:\n  trusted: [Octocat, 'dependabot[bot]']\n")
    assert config.triage.trusted == ("Octocat", "dependabot[bot]")
    assert config.triage.trusts("octocat") and config.triage.trusts("Dependabot[bot]")
    assert not config.triage.trusts("octocat2")
    assert load(None).triage.trusted == ()  # nobody beyond write access by default


def test_the_selected_tests_budget_is_the_repositorys_to_set():
    assert load("triage:\n  budget_seconds: 120\n").triage.budget_seconds == 120
    assert load(None).triage.budget_seconds is None  # the tables' default
    assert "selected" in load(None).suites  # so `/etriage run selected --all` is known


def test_no_file_means_defaults_and_no_devices():
    config = load(None)
    assert config == RepoConfig.defaults()
    assert config.triage.suites == ("multi_method", "mutable_buffer")
    assert config.triage.targets == ("host", "host-native", "qnn-htp-sim")
    assert config.commands is not None and config.ci_logs is not None
    assert dict(config.labels) == DEFAULT_LABELS
    assert config.devices is None and config.device_targets() == frozenset()
    assert config.targets["android-sm8650"] == Target("android-sm8650", "device", "SM8650")
    assert {"multi_method", "mutable_buffer", "probes", "qnn"} <= set(config.suites)


@pytest.mark.parametrize("text, on", [
    ("", set()),
    ("# only a comment\n", set()),
    ("triage:\n", {"triage"}),
    ("commands: {}\n", {"commands"}),
    ("labels:\n", {"labels"}),
    ("ci_logs: {}\ndevices: {}\n", {"ci_logs", "devices"}),
])
def test_a_section_that_is_absent_is_off(text, on):
    config = load(text)
    sections = ("triage", "commands", "labels", "ci_logs", "devices")
    assert {name for name in sections if getattr(config, name) is not None} == on


def test_devices_section_enables_every_device_target_by_default():
    assert load("devices:\n").device_targets() == {"android-sm8650", "android-sm8750"}


# (config text, the one expected error)
ERRORS = [
    ("tirage: {}\n", "line 1: top level: unknown key 'tirage' (did you mean 'triage'?)"),
    ("triage:\n  suits: [qnn]\n", "line 2: triage: unknown key 'suits' (did you mean 'suites'?)"),
    ("commands:\n  enabled: true\n", "line 2: commands: unknown key 'enabled' (known: none)"),
    ("labels:\n  multi_method: x\n", "line 2: labels.multi_method: 'multi_method' is not one of"),
    ("ci_logs:\n  workflow: [pull]\n", "line 2: ci_logs: unknown key 'workflow' (did you mean 'workflows'?)"),
    ("devices:\n  pool: lab\n", "line 2: devices: unknown key 'pool'"),
    ("suites:\n  mine:\n    description: x\n    timeout: 5\n", "line 4: suites.mine: unknown key 'timeout'"),
    ("targets:\n  board:\n    kind: device\n    sock: SM8650\n", "line 4: targets.board: unknown key 'sock' (did you mean 'soc'?)"),
    # wrong types
    ("triage: [host]\n", "line 1: triage: must be a mapping (key: value)"),
    ("triage:\n  suites: qnn\n", "line 2: triage.suites: must be a list"),
    ("triage:\n  suites: [1]\n", "line 2: triage.suites[0]: must be a string"),
    ("triage:\n  targets: [Host Machine]\n", "line 2: triage.targets[0]: 'Host Machine' is not a name"),
    ("triage:\n  paths: [a, b]\n", "line 2: triage.paths: must be a mapping"),
    ("triage:\n  trusted: octocat\n", "line 2: triage.trusted: must be a list"),
    ("triage:\n  trusted: [octo cat]\n", "line 2: triage.trusted[0]: 'octo cat' is not a GitHub login"),
    ("triage:\n  trusted:\n    - ok\n    - -leading-dash\n", "line 4: triage.trusted[1]: '-leading-dash' is not a GitHub login"),
    ("triage:\n  trusted: [12345]\n", "line 2: triage.trusted[0]: must be a string"),
    ("triage:\n  paths: {'a/**': 3}\n", "line 2: triage.paths.a/**: must be a string"),
    ("triage:\n  paths:\n    'third-party/**': qnn\n",
     "line 3: triage.paths.third-party/**: unknown backend 'qnn' (known: portable, xnnpack, qualcomm)"),
    ("labels: [a]\n", "line 1: labels: must be a mapping"),
    ("labels:\n  lint: {name: x}\n", "line 2: labels.lint: must be a string"),
    ("ci_logs:\n  max_bytes: lots\n", "line 2: ci_logs.max_bytes: must be an integer"),
    ("ci_logs:\n  max_bytes: true\n", "line 2: ci_logs.max_bytes: must be an integer"),
    ("ci_logs:\n  max_bytes: 0\n", "line 2: ci_logs.max_bytes: must be a positive number of bytes"),
    ("triage:\n  budget_seconds: 1h\n", "line 2: triage.budget_seconds: must be an integer"),
    ("triage:\n  budget_seconds: 5\n", "line 2: triage.budget_seconds: must be between 10 and 1800 seconds"),
    ("triage:\n  budget_seconds: 86400\n", "line 2: triage.budget_seconds: must be between 10 and 1800 seconds"),
    ("commands: on\n", "line 1: commands: must be a mapping"),
    ("targets:\n  board: {soc: X}\n", "line 2: targets.board: missing required key 'kind'"),
    ("targets:\n  board: {kind: phone}\n", "line 2: targets.board.kind: 'phone' is not one of emulator, device"),
    ("targets:\n  Board: {kind: device}\n", "line 2: targets.Board: 'Board' is not a name"),
    ("targets:\n  $(reboot): {kind: device}\n", "line 2: targets.$(reboot): '$(reboot)' is not a name"),
    ("suites: [a]\n", "line 1: suites: must be a mapping"),
    ("1: x\n", "line 1: top level: key '1' must be a string"),
    ("triage: {}\ntriage: {}\n", "line 2: triage: duplicate key"),
    ("- triage\n", "line 1: top level: must be a mapping"),
    ("just text\n", "line 1: top level: must be a mapping"),
    # names that point nowhere
    ("triage:\n  suites: [multi_method, nope]\n", "line 2: triage.suites[1]: unknown suite 'nope'"),
    ("triage:\n  targets:\n    - host\n    - qnn-htp-sym\n", "line 4: triage.targets[1]: unknown target 'qnn-htp-sym' (did you mean 'qnn-htp-sim'?)"),
    ("devices:\n  targets: [host]\n", "line 2: devices.targets[0]: 'host' is not a device target"),
    # not YAML
    ("triage: [host\n", "line 2: not valid YAML: while parsing a flow sequence, expected ',' or ']'"),
    ("triage:\n\tsuites: []\n", "line 2: not valid YAML"),
    ("a: 1\n---\nb: 2\n", "line 2: not valid YAML: expected a single document in the stream, but found another document"),
    ("triage: *nothing\n", "line 1: not valid YAML: found undefined alias"),
    ("x: !!python/object:os.system {}\n", "line 1: top level: unknown key 'x'"),
]


@pytest.mark.parametrize("text, error", ERRORS, ids=[e[:45] for _, e in ERRORS])
def test_each_mistake_is_reported_with_its_line(text, error):
    errors = validate_repo_config(text)
    assert len(errors) == 1, errors
    assert errors[0].startswith(error), errors


def test_all_mistakes_are_reported_at_once():
    text = "tirage: {}\nlabels:\n  bogus: x\ntargets:\n  b: {kind: phone}\n"
    assert [e.split(":")[0] for e in validate_repo_config(text)] == ["line 1", "line 3", "line 5"]
    with pytest.raises(RepoConfigError) as error:
        load(text)
    assert len(error.value.errors) == 3
    assert str(error.value).startswith(".github/etriage.yml: line 1:")


def test_python_tags_are_never_constructed():
    errors = validate_repo_config("triage:\n  suites: !!python/object/apply:os.system [echo pwned]\n")
    assert errors == ["line 2: triage.suites: must be a list"]


# ---- cache -------------------------------------------------------------------------------------

class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Fetcher:
    def __init__(self, text):
        self.text, self.calls = text, 0

    def __call__(self):
        self.calls += 1
        return self.text


def test_cache_keeps_a_config_for_its_ttl():
    clock, fetch = Clock(), Fetcher("triage: {}\n")
    cache = RepoConfigCache(ttl_seconds=60, clock=clock)
    first = cache.get("o/r", fetch)
    assert cache.get("o/r", fetch) is first and fetch.calls == 1
    assert cache.get("o/other", fetch) is not first and fetch.calls == 2
    clock.now += 61
    fetch.text = "commands: {}\n"
    assert cache.get("o/r", fetch).commands is not None and fetch.calls == 3


def test_cache_by_blob_sha_ignores_the_clock():
    clock, fetch = Clock(), Fetcher("triage: {}\n")
    cache = RepoConfigCache(ttl_seconds=60, clock=clock)
    cache.get("o/r", fetch, version="sha1")
    clock.now += 3600
    cache.get("o/r", fetch, version="sha1")
    assert fetch.calls == 1
    cache.get("o/r", fetch, version="sha2")
    assert fetch.calls == 2


def test_cache_keeps_errors_too_and_can_be_invalidated():
    clock, fetch = Clock(), Fetcher("tirage: {}\n")
    cache = RepoConfigCache(ttl_seconds=60, clock=clock)
    for _ in range(2):
        with pytest.raises(RepoConfigError):
            cache.get("o/r", fetch)
    assert fetch.calls == 1
    fetch.text = None
    cache.invalidate("o/r")
    assert cache.get("o/r", fetch) == RepoConfig.defaults() and fetch.calls == 2
    cache.invalidate()
    cache.get("o/r", fetch)
    assert fetch.calls == 3


@pytest.mark.parametrize("text", [
    "commands: !!python/object/new:os.system [echo pwned]\n",
    "suites:\n  mine: !!python/name:os.system\n",
    "triage: !!set {a, b}\n",
    "targets:\n  board: {kind: device, soc: !!python/object/apply:os.getcwd []}\n",
])
def test_unsafe_or_odd_tags_are_errors_not_crashes(text):
    errors = validate_repo_config(text)
    assert len(errors) == 1 and errors[0].startswith(("line 1:", "line 2:")), errors
