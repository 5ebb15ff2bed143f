"""The device inventory: which devices a lab has, how each is reached, what it carries.

A lab describes its devices in a YAML file (the worker's `ETRIAGE_DEVICES`, or
`--devices FILE`); `sync_to_database` mirrors it into the `devices` table so the dashboard and
other hosts see one inventory, and `load_from_database` reads it back. The table lives here
for now (its own MetaData); it moves to bot/history.py's migrations when the dashboard has them.

    devices:
      lab-linux-1:                      # the device's id (also `--target ssh:lab-linux-1`)
        transport: ssh                  # ssh | emulated | android
        address: etriage@10.0.0.5:22    # ssh/emulated: user@host:port; android: the adb serial
        adb_host: 10.0.0.9:5037         # android only, optional: the adb server (`adb -H/-P`)
        soc: x86_64                     # a row of triage_rules/tables/socs.yaml
        labels: [linux]
        runner: pybind                  # pybind | rebuilt | /path/to/executor_runner on the device
        runtime: [/opt/et/bin/python3]  # the Python that runs tasks/devices/pybind_runner.py
        backends: [portable, xnnpack]   # what that runtime has
        enabled: true
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from sqlalchemy import JSON, Boolean, Column, MetaData, String, Table, create_engine, delete, insert, select
from sqlalchemy.engine import Engine

from tasks.devices.soc import Soc, UnknownSoc, soc

Transport = Literal["ssh", "emulated", "android"]
DEFAULT_WORK_ROOT = {"ssh": "/tmp", "emulated": "/tmp", "android": "/data/local/tmp"}


class InventoryError(ValueError):
    """The inventory file is missing, malformed or names something unknown."""


class Device(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    transport: Transport
    address: str  # user@host:port (ssh, emulated) or the adb serial (android)
    soc: str
    adb_host: str = ""
    labels: tuple[str, ...] = ()
    # How the device runs a program bundle: "pybind" (tasks/devices/pybind_runner.py under the
    # device's `runtime` Python, which has the executorch package), "rebuilt" (the change's own
    # executor_runner built for the device's machine, pushed with the bundle) or the path of an
    # executor_runner already on the device.
    runner: str = "pybind"
    runtime: tuple[str, ...] = ("python3",)
    # What goes before a native runner on the device, e.g. [qemu-aarch64-static] on an emulated
    # arm64 device without binfmt_misc (tasks/devices/emulated.py; empty: found on the device).
    runner_prefix: tuple[str, ...] = ()
    backends: tuple[str, ...] = ("portable",)  # what the device's runtime has (programs needing more are skipped)
    work_root: str = ""
    enabled: bool = True
    min_free_mb: int = 64  # the health check refuses a lease below this
    identity: str = ""  # ssh private key on the worker ("" -> ETRIAGE_DEVICE_KEY)
    known_hosts: str = ""  # the lab's known_hosts on the worker ("" -> ETRIAGE_DEVICE_KNOWN_HOSTS)

    @field_validator("soc")
    @classmethod
    def _known_soc(cls, value: str) -> str:
        soc(value)  # raises UnknownSoc (a ValueError: pydantic reports it with the field)
        return value

    @property
    def device_class(self) -> str:
        """What a job asks for and a queue serves: the SoC (`device.SM8750`, `device.x86_64`)."""
        return self.soc

    @property
    def queue(self) -> str:
        return f"device.{self.device_class}"

    @property
    def soc_info(self) -> Soc:
        return soc(self.soc)

    @property
    def root(self) -> str:
        return self.work_root or DEFAULT_WORK_ROOT[self.transport]

    def ssh_parts(self) -> tuple[str, str, int]:
        """(user, host, port) of an ssh or emulated device."""
        user, _, hostport = self.address.rpartition("@")
        if hostport.startswith("["):  # [::1]:2222
            host, _, port = hostport[1:].partition("]")
            port = port.lstrip(":")
        else:
            host, _, port = hostport.partition(":")
        return user or "root", host, int(port or 22)

    def describe(self) -> str:
        return f"{self.id} ({self.soc})"


def parse_inventory(data: dict, source: str = "inventory") -> dict[str, Device]:
    if not isinstance(data, dict) or set(data) - {"devices"}:
        raise InventoryError(f"{source}: expected one top-level key, devices")
    devices = {}
    for name, entry in (data.get("devices") or {}).items():
        try:
            devices[name] = Device(id=name, **(entry or {}))
        except (ValidationError, UnknownSoc, TypeError) as error:
            raise InventoryError(f"{source}: devices.{name}: {_first_error(error)}") from None
    return devices


def load_inventory(path: Path | str) -> dict[str, Device]:
    path = Path(path)
    if not path.is_file():
        raise InventoryError(f"{path}: device inventory not found")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise InventoryError(f"{path}: not valid YAML: {error}") from None
    return parse_inventory(data, str(path))


def _first_error(error: Exception) -> str:
    if isinstance(error, ValidationError):
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return f"{where}: {first['msg']}" if where else first["msg"]
    return str(error)


# --- the database copy --------------------------------------------------------------------

metadata = MetaData()
devices_table = Table(
    "etriage_devices", metadata,
    Column("id", String(100), primary_key=True),
    Column("transport", String(20), nullable=False),
    Column("address", String(300), nullable=False),
    Column("soc", String(40), nullable=False, index=True),
    Column("enabled", Boolean, nullable=False, default=True),
    Column("spec", JSON, nullable=False),  # the whole Device, for the fields not in columns
)


def engine_for(url: str) -> Engine:
    engine = create_engine(url)
    metadata.create_all(engine)
    return engine


def sync_to_database(engine: Engine, devices: dict[str, Device]) -> None:
    """The database's inventory becomes exactly `devices` (one transaction)."""
    with engine.begin() as conn:
        conn.execute(delete(devices_table))
        for device in devices.values():
            conn.execute(insert(devices_table).values(
                id=device.id, transport=device.transport, address=device.address, soc=device.soc,
                enabled=device.enabled, spec=device.model_dump(mode="json")))


def load_from_database(engine: Engine) -> dict[str, Device]:
    with engine.connect() as conn:
        rows = conn.execute(select(devices_table.c.spec, devices_table.c.enabled)).all()
    devices = {}
    for spec, enabled in rows:  # `enabled` is the column: an operator may flip it in place
        device = Device(**{**spec, "enabled": bool(enabled)})
        devices[device.id] = device
    return devices


def set_enabled(engine: Engine, device_id: str, enabled: bool) -> None:
    with engine.begin() as conn:
        conn.execute(devices_table.update().where(devices_table.c.id == device_id).values(enabled=enabled))
