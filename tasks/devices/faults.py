"""Faults that are the device's, never the change's.

Every transport turns what went wrong into one `DeviceFault` with a kind. The pipeline retries
the retryable ones a bounded number of times (on the same or another device), then reports the
run as an environment failure whose log line the engine files under `device_infra`
(triage_rules/rules: device-connection, device-ssh, device-timeout); the pool counts it toward
the device's quarantine.
"""
from __future__ import annotations

# kind -> (retryable, what the log says after "device <id> (<SoC>): ")
KINDS = {
    "refused": (True, "connection refused"),
    "unreachable": (True, "connection timed out"),
    "offline": (True, "connection lost mid-run (device offline)"),
    "timeout": (True, "run timed out and was killed"),
    "disk_full": (True, "not available: no space left on the device"),
    "host_key": (False, "not available: its host key is not the one the lab recorded (refused)"),
    "auth": (False, "not available: authentication refused"),
    "soc_mismatch": (False, "not available: not the SoC the inventory says"),
    "unauthorized": (False, "unauthorized (adb)"),
    "missing": (True, "not found (adb)"),
    "protocol": (True, "connection closed unexpectedly"),
}


class DeviceFault(Exception):
    """A device (or its host) failed the run; `kind` is one of KINDS."""

    def __init__(self, kind: str, detail: str, device: str = ""):
        if kind not in KINDS:
            raise ValueError(f"unknown device fault kind {kind!r}")
        self.kind, self.detail, self.device = kind, detail, device
        super().__init__(self.line())

    @property
    def retryable(self) -> bool:
        return KINDS[self.kind][0]

    def at(self, device: str) -> "DeviceFault":
        """The same fault, naming the device ("lab-1 (SM8750)")."""
        return DeviceFault(self.kind, self.detail, device)

    def line(self) -> str:
        """The primary line for the engine and the report: device, SoC, what happened."""
        who = f"device {self.device}" if self.device else "device"
        return f"DeviceInfraError: {who}: {KINDS[self.kind][1]}: {self.detail}"
