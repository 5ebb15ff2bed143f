"""Every device fault's line is filed by the engine under device_infra, as the environment's
fault, by etriage's own rule (not by a rule for adb's wording that happens to match)."""
from __future__ import annotations

import pytest

from tasks.devices.faults import KINDS, DeviceFault
from triage_rules import classify_text


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_device_fault_is_device_infra_and_the_environment(kind):
    line = DeviceFault(kind, "what the transport saw", "emu-1 (SoC emulated-arm64, ssh device@10.213.0.2:22)").line()
    [failure] = classify_text(f"running programs on the device\n{line}\n", failed=True)
    assert (failure.category, failure.decided_by, failure.environment) == ("device_infra", "etriage-device-fault", True)
    assert failure.line == line and KINDS[kind][1].split(" (")[0] in failure.title
    assert "emu-1" in failure.explanation
