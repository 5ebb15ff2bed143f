"""docs/CONFIGURATION.md is the one list of environment variables: every variable the code
reads is in it, and the worker's defaults there are the code's."""
from __future__ import annotations

import re

from tasks.celery_app import TOOL_VARIABLES, WorkerOptions
from tests.service.conftest import REPO_ROOT

DOC = REPO_ROOT / "docs" / "CONFIGURATION.md"


def documented() -> dict[str, str]:
    """variable -> its default cell, from the doc's tables."""
    rows = re.findall(r"^\| `([A-Z_]+)` \| ([^|]*) \|", DOC.read_text(), re.M)
    return {name: default.strip() for name, default in rows}


def test_every_variable_the_code_reads_is_documented():
    names = set()
    for path in [*REPO_ROOT.glob("bot/**/*.py"), *REPO_ROOT.glob("tasks/**/*.py")]:
        names |= set(re.findall(r'"((?:ETRIAGE|REDIS|DATABASE)_[A-Z_]+)"', path.read_text()))
    names |= set(TOOL_VARIABLES)
    names.discard("ETRIAGE_PYTEST_CONFIG")  # internal: the pipeline sets it for its own pytest plugin
    assert names - set(documented()) == set()


def test_worker_defaults_match_the_doc():
    docs, defaults = documented(), WorkerOptions.from_env({})
    assert defaults == WorkerOptions()  # an empty environment means the documented defaults
    for variable, field in [("ETRIAGE_VISIBILITY_TIMEOUT", "visibility_timeout"),
                            ("ETRIAGE_TASK_SOFT_TIME_LIMIT", "soft_time_limit"),
                            ("ETRIAGE_TASK_TIME_LIMIT", "time_limit"),
                            ("ETRIAGE_TASK_MAX_RETRIES", "max_retries"),
                            ("ETRIAGE_GITHUB_WRITE_INTERVAL", "github_write_interval"),
                            ("ETRIAGE_PENDING_REPORT_INTERVAL", "pending_report_interval"),
                            ("ETRIAGE_RUN_EXPIRY_HOURS", "run_expiry_hours"),
                            ("ETRIAGE_SUITE_TIMEOUT", "suite_timeout")]:
        assert float(docs[variable].strip("`")) == getattr(defaults, field), variable
    fetch = defaults.fetch
    for variable, value in [("ETRIAGE_FETCH_TIMEOUT", fetch.timeout_seconds),
                            ("ETRIAGE_MIRROR_HORIZON_DAYS", fetch.horizon_days),
                            ("ETRIAGE_WORKTREES_MAX_GIB", fetch.worktrees_max_bytes / 2**30),
                            ("ETRIAGE_MIRROR_MAX_GIB", fetch.mirror_max_bytes / 2**30),
                            ("ETRIAGE_DISK_RESERVE_GIB", fetch.reserve_bytes / 2**30)]:
        assert float(docs[variable].strip("`")) == value, variable
    assert docs["ETRIAGE_TARGETS"] == f"`{','.join(defaults.targets)}`"
    assert docs["ETRIAGE_SANDBOX_BWRAP"] == f"`{defaults.sandbox_bwrap}`"


def test_tool_variables_are_read_once_into_the_options():
    options = WorkerOptions.from_env({"QNN_SDK_ROOT": "/opt/qnn", "ETRIAGE_SUITES": "probes, x",
                                      "ANDROID_SERIAL": " "})
    assert dict(options.tool_env) == {"QNN_SDK_ROOT": "/opt/qnn"}
    assert options.suites == ("probes", "x")


def test_device_settings_reach_the_device_targets_but_never_a_sandboxed_run(tmp_path):
    from tasks.devices.connect import DeviceSettings
    from tasks.pipeline.sandbox import scrubbed_env

    environ = {"ETRIAGE_DEVICES": "/lab/devices.yaml", "ETRIAGE_DEVICE_KEY": "/lab/key",
               "ETRIAGE_DEVICE_BROKER_URL": "redis://broker:6379/0", "QNN_SDK_ROOT": "/opt/qnn"}
    options = WorkerOptions.from_env(environ)
    settings = DeviceSettings.from_env(dict(options.tool_env))
    assert (settings.inventory, settings.key, settings.broker_url) == (
        "/lab/devices.yaml", "/lab/key", "redis://broker:6379/0")
    env = scrubbed_env(tmp_path, pass_through=dict(options.tool_env))
    assert env["QNN_SDK_ROOT"] == "/opt/qnn"
    assert not [k for k in env if k.startswith("ETRIAGE_")]
