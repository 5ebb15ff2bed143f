"""The SoC table (triage_rules/tables/socs.yaml): SoC name -> HTP architecture, or, for a device
without a Hexagon, the machine its `uname -m` must report. Data, not code: a lab adds a row."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import yaml

SOC_TABLE = Path(__file__).resolve().parents[2] / "triage_rules" / "tables" / "socs.yaml"


class UnknownSoc(ValueError):
    """A device names a SoC the table does not have."""


@dataclass(frozen=True)
class Soc:
    name: str
    htp_arch: str = ""  # "v75": the QNN HTP libraries this SoC needs ("" for a CPU-only device)
    machine: str = ""  # `uname -m` a CPU-only device reports
    vtcm_mb: int = 0
    chipset: str = ""

    @property
    def qnn_libraries(self) -> tuple[str, ...]:
        """The QNN libraries ExecuTorch's runner needs on a device with this SoC."""
        if not self.htp_arch:
            return ()
        arch = self.htp_arch.upper()
        return ("libQnnHtp.so", "libQnnSystem.so", f"libQnnHtp{arch}Stub.so", f"libQnnHtp{arch}Skel.so",
                "libQnnHtpPrepare.so")


@functools.cache
def load_socs(path: Path = SOC_TABLE) -> dict[str, Soc]:
    data = yaml.safe_load(Path(path).read_text()) or {}
    unknown = set(data) - {"socs", "cpus"}
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {', '.join(sorted(unknown))}")
    table = {}
    for name, row in (data.get("socs") or {}).items():
        extra = set(row) - {"htp_arch", "vtcm_mb", "chipset"}
        if extra or not str(row.get("htp_arch", "")).startswith("v"):
            raise ValueError(f"{path}: socs.{name}: needs htp_arch like v75 (unknown keys: {sorted(extra)})")
        table[name] = Soc(name, htp_arch=row["htp_arch"], vtcm_mb=int(row.get("vtcm_mb", 0)),
                          chipset=row.get("chipset", ""))
    for name, row in (data.get("cpus") or {}).items():
        if set(row) != {"machine"}:
            raise ValueError(f"{path}: cpus.{name}: exactly one key, machine")
        table[name] = Soc(name, machine=row["machine"])
    return table


def soc(name: str) -> Soc:
    table = load_socs()
    if name not in table:
        raise UnknownSoc(f"unknown SoC {name!r}: add it to {SOC_TABLE.name} (known: {', '.join(sorted(table))})")
    return table[name]
