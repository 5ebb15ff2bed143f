"""The SoC table against ExecuTorch's own, and the device inventory (file and database)."""
from __future__ import annotations

import re
import sys

import pytest
import yaml

from tasks.devices.inventory import (InventoryError, engine_for, load_from_database, load_inventory,
                                     parse_inventory, set_enabled, sync_to_database)
from tasks.devices.soc import UnknownSoc, load_socs, soc
from tasks.pipeline.overlay import installed_package_dir


def test_soc_table_agrees_with_the_installed_executorch():
    """Every Qualcomm row's HTP arch and VTCM size is what executorch's qc_schema.py says
    (read as text: the bot never imports executorch.backends.qualcomm)."""
    schema = (installed_package_dir(sys.executable) / "backends/qualcomm/serialization/qc_schema.py").read_text()
    found = {m.group(1): (f"v{m.group(2)}", int(m.group(3))) for m in re.finditer(
        r"QcomChipset\.(\w+),\s*HtpInfo\(HtpArch\.V(\d+),\s*(\d+)\)", schema)}
    qualcomm = {name: s for name, s in load_socs().items() if s.htp_arch}
    assert len(qualcomm) >= 8
    for name, row in qualcomm.items():
        assert found.get(name) == (row.htp_arch, row.vtcm_mb), name


def test_soc_rows_and_libraries():
    assert soc("SM8650").htp_arch == "v75" and soc("SM8750").htp_arch == "v79"
    assert "libQnnHtpV79Skel.so" in soc("SM8750").qnn_libraries
    assert soc("emulated-arm64").machine == "aarch64" and soc("emulated-arm64").qnn_libraries == ()
    with pytest.raises(UnknownSoc, match="SM9999"):
        soc("SM9999")


GOOD = """
devices:
  phone-1: {transport: android, address: R5CT1234ABC, soc: SM8750, adb_host: "10.0.0.9:5037"}
  board-1: {transport: ssh, address: "etriage@10.0.0.5:2222", soc: arm64, labels: [linux]}
  emu-1: {transport: emulated, address: "root@[::1]:2200", soc: emulated-arm64, enabled: false}
"""


def test_inventory_file(tmp_path):
    path = tmp_path / "devices.yaml"
    path.write_text(GOOD)
    devices = load_inventory(path)
    assert devices["phone-1"].queue == "device.SM8750" and devices["phone-1"].root == "/data/local/tmp"
    assert devices["board-1"].ssh_parts() == ("etriage", "10.0.0.5", 2222)
    assert devices["emu-1"].ssh_parts() == ("root", "::1", 2200) and not devices["emu-1"].enabled


@pytest.mark.parametrize("text, error", [
    ("devices:\n  x: {transport: ssh, address: a@b, soc: SM9999}\n", "devices.x: soc: .*unknown SoC 'SM9999'"),
    ("devices:\n  x: {transport: usb, address: a, soc: SM8750}\n", "devices.x: transport"),
    ("devices:\n  x: {transport: ssh, address: a@b, soc: x86_64, colour: red}\n", "devices.x: colour"),
    ("devices:\n  x: {transport: ssh, soc: x86_64}\n", "devices.x: address"),
    ("machines: {}\n", "expected one top-level key, devices"),
])
def test_inventory_errors_name_the_device_and_field(tmp_path, text, error):
    path = tmp_path / "devices.yaml"
    path.write_text(text)
    with pytest.raises(InventoryError, match=error):
        load_inventory(path)


def test_missing_inventory_file(tmp_path):
    with pytest.raises(InventoryError, match="not found"):
        load_inventory(tmp_path / "nope.yaml")




@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_inventory_round_trips_through_the_database(backend, tmp_path, request):
    url = f"sqlite:///{tmp_path / 'devices.db'}" if backend == "sqlite" else request.getfixturevalue("postgres_url")
    engine = engine_for(url)
    devices = parse_inventory(yaml.safe_load(GOOD))
    sync_to_database(engine, devices)
    assert load_from_database(engine) == devices
    set_enabled(engine, "phone-1", False)
    assert not load_from_database(engine)["phone-1"].enabled
    sync_to_database(engine, {"board-1": devices["board-1"]})  # the file is the truth: others go
    assert list(load_from_database(engine)) == ["board-1"]
    sync_to_database(engine, {})
