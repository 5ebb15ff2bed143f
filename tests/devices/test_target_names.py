"""Device targets are asked for by name and never run by default."""
from __future__ import annotations

import pytest

from tasks.pipeline.device_target import DeviceTarget
from tasks.pipeline.tables import load_tables
from tasks.pipeline.targets import make_target


def test_device_targets_only_by_name():
    targets = load_tables().targets
    assert "ssh" not in list(targets) and "emulated-arm64" not in list(targets)  # the default run
    assert "ssh:lab-1" in targets and "emulated-arm64" in targets
    spec = targets["ssh:lab-1"]
    assert (spec.name, spec.kind, spec.suite_kinds, spec.queue) == ("ssh:lab-1", "ssh", ("probes",), "device")
    assert targets["emulated-arm64"].queue == "device.emulated-arm64"
    assert targets["android:phone-1"].kind == "android"
    assert isinstance(make_target(spec, {}), DeviceTarget)


@pytest.mark.parametrize("name", ["ssh:", "phone:lab-1", "lab-1", ":lab-1"])
def test_other_names_stay_unknown(name):
    targets = load_tables().targets
    assert name not in targets
    with pytest.raises(KeyError):
        targets[name]
