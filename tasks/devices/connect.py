"""One door to a device, whatever its transport: `open_transport(device, settings)` and the
health check the pool runs before each lease (reachable, the expected SoC, free space)."""
from __future__ import annotations

from dataclasses import dataclass

from tasks.devices import emulated
from tasks.devices.android import AdbServer, AdbTransport
from tasks.devices.faults import DeviceFault
from tasks.devices.inventory import Device
from tasks.devices.ssh import SshOptions, SshTransport


@dataclass(frozen=True)
class DeviceSettings:
    """What a worker knows about reaching its lab, read once at start (never at import)."""

    inventory: str = ""  # ETRIAGE_DEVICES: the inventory YAML
    key: str = ""  # ETRIAGE_DEVICE_KEY: ssh private key
    known_hosts: str = ""  # ETRIAGE_DEVICE_KNOWN_HOSTS
    redis_url: str = ""  # leases; "" runs without the pool (one user: the command line)
    broker_url: str = ""  # the device queues' broker: set where the devices hang off other hosts
    connect_timeout: float = 10.0

    @classmethod
    def from_env(cls, environ) -> "DeviceSettings":
        return cls(inventory=environ.get("ETRIAGE_DEVICES", ""), key=environ.get("ETRIAGE_DEVICE_KEY", ""),
                   known_hosts=environ.get("ETRIAGE_DEVICE_KNOWN_HOSTS", ""),
                   redis_url=environ.get("ETRIAGE_DEVICE_REDIS_URL", "") or environ.get("REDIS_URL", ""),
                   broker_url=environ.get("ETRIAGE_DEVICE_BROKER_URL", ""))

    def ssh_options(self, device: Device) -> SshOptions:
        return SshOptions(identity=device.identity or self.key, known_hosts=device.known_hosts or self.known_hosts,
                          connect_timeout=self.connect_timeout)


def open_transport(device: Device, settings: DeviceSettings):
    """A connected transport (a context manager); raises DeviceFault."""
    if device.transport in ("ssh", "emulated"):
        transport = SshTransport(device, settings.ssh_options(device))
        transport.connect()
        return transport
    transport = AdbTransport(device, AdbServer.at(device.adb_host))
    transport.connect()
    return transport


def health_check(device: Device, settings: DeviceSettings) -> None:
    """Reachable, the SoC the inventory says, at least min_free_mb free in its work root."""
    with open_transport(device, settings) as transport:
        check_open(transport, device)


def check_open(transport, device: Device) -> None:
    expected = device.soc_info.machine
    if device.soc_info.htp_arch and hasattr(transport, "soc_model"):
        reported = transport.soc_model()
        if reported != device.soc:
            raise DeviceFault("soc_mismatch", f"the phone reports ro.soc.model={reported or '(empty)'}, the "
                                              f"inventory says {device.soc}", device.describe())
    elif expected:
        # an emulated arm64 device is aarch64 when it can run aarch64 programs (QEMU user mode)
        machine = emulated.machine(transport, device) if device.transport == "emulated" else transport.machine()
        if machine != expected:
            raise DeviceFault("soc_mismatch", f"`uname -m` says {machine}, the inventory's {device.soc} "
                                              f"means {expected}", device.describe())
    free = transport.free_kib(device.root)
    if free < device.min_free_mb * 1024:
        raise DeviceFault("disk_full", f"No space left on device: {free} KiB free in {device.root}, "
                                       f"{device.min_free_mb} MiB wanted", device.describe())
