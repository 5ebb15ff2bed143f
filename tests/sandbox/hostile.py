"""A hostile change's payload: what an attacker's code would try from inside a triage run.

Run as `python hostile.py ATTACK [ARGS...]` (the unit tests) or imported from a change's module
(`attack_all`, the end-to-end test). Each attempt prints one line:
    HOSTILE <attack> <target> refused: <why>
    HOSTILE <attack> <target> ESCAPED: <what it got>
The tests fail on any ESCAPED line and on a missing line (an attempt that never reported).
Nothing here sends traffic off this machine: the outside address is only a connect() target,
and with no network interface it fails before a packet could leave.
"""
import ctypes
import errno
import os
import signal
import socket
import subprocess
import sys
import time

SECRETS = ("ghs_", "whsec", "-----BEGIN", "ETRIAGE_GITHUB", "secret")


def say(attack, target, escaped, detail):
    print(f"HOSTILE {attack} {target} {'ESCAPED' if escaped else 'refused'}: {detail}", flush=True)


def read(*paths):
    for path in paths:
        try:
            with open(path, "rb") as handle:
                data = handle.read(4096)
            say("read", path, True, f"{len(data)} bytes: {data[:40]!r}")
        except OSError as error:
            say("read", path, False, errno.errorcode.get(error.errno, str(error)))


def environ(*pids):
    """/proc/1/environ, every visible process's environment, and the worker's pid by number."""
    seen = [p for p in os.listdir("/proc") if p.isdigit()]
    for pid in ["1", *seen, *pids]:
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                data = handle.read()
        except OSError as error:
            say("environ", pid, False, errno.errorcode.get(error.errno, str(error)))
            continue
        leaked = [s for s in SECRETS if s.encode() in data]
        say("environ", pid, bool(leaked) or pid in pids, f"readable; secrets {leaked or 'none'}")


def connect(*addresses):
    for address in addresses:
        host, _, port = address.rpartition(":")
        start = time.monotonic()
        try:
            socket.create_connection((host, int(port)), timeout=5).close()
            say("connect", address, True, "connected")
        except OSError as error:
            took = time.monotonic() - start
            say("connect", address, took > 1.0, f"{errno.errorcode.get(error.errno, error)} after {took:.2f}s")


def write(*paths):
    for path in paths:
        try:
            with open(path, "wb") as handle:
                handle.write(b"pwned\n")
            say("write", path, True, "written")
        except OSError as error:
            say("write", path, False, errno.errorcode.get(error.errno, str(error)))


def kill(*pids):
    """The worker by pid, the namespace's init, then our parent (bubblewrap's own process: when it
    dies, --die-with-parent takes this run with it, so that attempt is announced first)."""
    targets = [*[(f"pid{p}", int(p)) for p in pids], ("init", 1), ("parent", os.getppid())]
    for name, pid in targets:
        if name == "parent":
            print("HOSTILE kill parent-attempted", flush=True)
        try:
            os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
            os.kill(pid, 0)
            say("kill", name, False, "signal sent but it survives (signals to init are ignored)")
        except ProcessLookupError:
            say("kill", name, not name.startswith("pid"), "no such process here" if name.startswith("pid")
                else "it died")
        except PermissionError:
            say("kill", name, False, "EPERM")


def escalate():
    try:
        os.setuid(0)
        say("escalate", "setuid(0)", True, f"uid now {os.getuid()}")
    except OSError as error:  # EINVAL: uid 0 is not even mapped in the run's user namespace
        say("escalate", "setuid(0)", False, errno.errorcode.get(error.errno, str(error)))
    status = open("/proc/self/status").read()
    caps = [line for line in status.splitlines() if line.startswith(("CapEff", "CapBnd", "NoNewPrivs"))]
    say("escalate", "capabilities", "CapEff:\t0000000000000000" not in caps[0] or "NoNewPrivs:\t1" not in status,
        "; ".join(caps))
    setuid_binaries = [os.path.join(d, n) for d in ("/usr/bin", "/usr/sbin") if os.path.isdir(d)
                       for n in os.listdir(d) if os.lstat(os.path.join(d, n)).st_mode & 0o4000]
    for binary in sorted(set(setuid_binaries))[:8]:
        try:
            out = subprocess.run([binary, "--help"] if binary.endswith("passwd") else [binary, "-c", "id -u"],
                                 capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
            root = "uid=0" in out.stdout or out.stdout.strip() == "0"
            say("escalate", binary, root, f"exit {out.returncode}, no root")
        except (OSError, subprocess.TimeoutExpired) as error:
            say("escalate", binary, False, str(error)[:80])
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x10000000) == 0:  # CLONE_NEWUSER: a nested namespace where it is "root"
        say("escalate", "unshare(user)", True, "made a nested user namespace")
    else:
        say("escalate", "unshare(user)", False, errno.errorcode.get(ctypes.get_errno(), "?"))


def forkbomb():
    """The classic one, that ignores its failures and forks forever."""
    while True:
        try:
            os.fork()
        except OSError:
            time.sleep(0.01)


def fill(path):
    written = 0
    chunk = b"x" * (1 << 20)
    try:
        with open(path, "wb") as handle:
            while written < (64 << 30):
                handle.write(chunk)
                written += len(chunk)
        say("fill", path, True, f"wrote {written >> 20} MiB")
    except OSError as error:
        say("fill", path, False, f"{errno.errorcode.get(error.errno, error)} after {written >> 20} MiB")
        raise


def sleep_forever():
    """A child in its own session and a grandchild: the timeout must take the whole tree."""
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(100000)"], start_new_session=True)
    print("HOSTILE sleep started", flush=True)
    time.sleep(100000)


def memory():
    hog = bytearray(64 << 30)
    say("memory", "64GiB", True, f"allocated {len(hog)}")


ATTACKS = {"read": read, "environ": environ, "connect": connect, "write": write, "kill": kill,
           "escalate": escalate, "forkbomb": forkbomb, "fill": fill, "sleep": sleep_forever,
           "memory": memory}

if __name__ == "__main__":
    ATTACKS[sys.argv[1]](*sys.argv[2:])
