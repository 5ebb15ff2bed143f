"""The torch a commit pins, and where that torch comes from.

ExecuTorch pins torch in `torch_pin.py` (`TORCH_VERSION = "2.13.0"`, and `NIGHTLY_VERSION` when
a nightly is pinned: install_requirements.py then asks for `torch==2.13.0.dev20260318`); other
trees name a `torch==` requirement. The installed torch serves when its release is the pin;
otherwise the pin is fetched from the registry into <store>/torch/<pin>/, put first on
PYTHONPATH; a pin that cannot be had is an environment verdict that names it, never a run on
another torch.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tasks.environments import registry
from tasks.pipeline import gitio

TORCH_VERSION = re.compile(r"^TORCH_VERSION\s*(?::\s*str\s*)?=\s*[\"']([^\"']+)[\"']", re.M)
NIGHTLY_VERSION = re.compile(r"^NIGHTLY_VERSION\s*(?::\s*str\s*)?=\s*[\"'](dev\d{8})[\"']", re.M)
REQUIREMENT = re.compile(r"(?<![\w.-])torch\s*==\s*([0-9][0-9A-Za-z.+!]*)")
INSTALLED_VERSION = re.compile(r"^__version__\s*=\s*[\"']([^\"']+)[\"']", re.M)


@dataclass
class TorchChoice:
    pin: str  # what the commit pins ("" when it pins nothing)
    pinned_in: str  # the file that says so
    version: str = ""  # the torch that runs
    directory: str = ""  # on PYTHONPATH ahead of the venv ("" for the installed torch)
    reason: str = ""  # why the pin cannot be had ("" when it can)


def read_pin(repo: Path, commit: str, files: tuple[str, ...]) -> tuple[str, str]:
    """(pin, file) from the first of `files` that pins torch in the commit, else ("", "")."""
    for name in files:
        try:
            text = gitio.show(repo, commit, name).decode(errors="replace")
        except gitio.GitError:
            continue
        found = TORCH_VERSION.search(text) if name.endswith("torch_pin.py") else None
        if found:
            nightly = NIGHTLY_VERSION.search(text)
            return (f"{found.group(1)}.{nightly.group(1)}" if nightly else found.group(1)), name
        found = REQUIREMENT.search("\n".join(line.split("#", 1)[0] for line in text.splitlines()))
        if found:
            return found.group(1), name
    return "", ""


def installed_torch(site_packages: Path) -> str:
    """The installed torch's version, read from its version.py (torch is never imported here)."""
    try:
        found = INSTALLED_VERSION.search((site_packages / "torch" / "version.py").read_text())
    except OSError:
        return ""
    return found.group(1) if found else ""


def release(version: str) -> str:
    """2.13.0+cpu -> 2.13.0 (the local label names a build, not a release)."""
    return version.split("+", 1)[0]


def choose(pin: str, pinned_in: str, installed: str, store: Path, log_dir: Path,
           fetch: bool = True) -> TorchChoice:
    if not pin or release(pin) == release(installed):
        return TorchChoice(pin, pinned_in, installed)
    directory = store / "torch" / pin
    if not fetch:
        return TorchChoice(pin, pinned_in, reason=f"torch {pin} (pinned in {pinned_in}) is not installed "
                                                  f"(installed: {installed or 'none'}) and fetching is off")
    got = registry.install(f"torch=={pin}", directory, log_dir / f"pip-torch-{pin}.log")
    if not got.ok:
        return TorchChoice(pin, pinned_in, reason=f"torch {pin}, pinned in {pinned_in}, cannot be had from "
                                                  f"the registry: {got.reason}")
    return TorchChoice(pin, pinned_in, pin, str(directory))
