#!/usr/bin/env bash
# Debian packages the tests and benchmarks need, and the sandbox's user. Idempotent; a no-op
# when all are present. Not root or no apt-get: say what is missing and carry on (the tests that
# need a package skip with a reason naming it; without bubblewrap nothing of a change runs).
set -u
# The unprivileged user a root worker drops to before running a change's code (docs/SANDBOX.md).
if [ "$(id -u)" = 0 ] && ! id etriage-sandbox >/dev/null 2>&1; then
    useradd --system --user-group --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin etriage-sandbox \
        || echo "system-deps: could not create the user etriage-sandbox" >&2
fi
want=()
command -v bwrap >/dev/null 2>&1 || want+=(bubblewrap)
command -v rg >/dev/null 2>&1 || want+=(ripgrep)
command -v git >/dev/null 2>&1 || want+=(git)
command -v patch >/dev/null 2>&1 || want+=(patch)
command -v cmake >/dev/null 2>&1 || want+=(cmake)
command -v g++ >/dev/null 2>&1 || want+=(g++)
command -v wrk >/dev/null 2>&1 || want+=(wrk)  # bench/webhook_load.py's load generator
# Native rebuilds (tasks/pipeline/native.py): Ninja and a compiler cache.
command -v ninja >/dev/null 2>&1 || want+=(ninja-build)
command -v ccache >/dev/null 2>&1 || want+=(ccache)
# ExecuTorch's own C++ tests (suite cxx_tests): googletest's sources and headers from Debian.
[ -f /usr/src/googletest/CMakeLists.txt ] || want+=(libgtest-dev)
[ -f /usr/include/gmock/gmock.h ] || want+=(libgmock-dev)
# The tests' PostgreSQL when none runs on 127.0.0.1:5432: a private server from Debian's binaries.
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || want+=(postgresql)
# The dashboard's browser tests: Debian's headless Chromium (no browser download).
command -v chromium >/dev/null 2>&1 || want+=(chromium)
# Device targets: a real OpenSSH server for the ssh target, adb for Android, an emulated arm64
# userland (QEMU user mode, debootstrap) and the cross compiler for the runtime.
command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || want+=(openssh-server)
command -v ssh >/dev/null 2>&1 || want+=(openssh-client)
command -v adb >/dev/null 2>&1 || want+=(adb)
command -v qemu-aarch64-static >/dev/null 2>&1 || want+=(qemu-user-static)
command -v debootstrap >/dev/null 2>&1 || want+=(debootstrap)
# The userland's sshd lives in a network namespace reached over a veth pair (ip netns, ip link).
command -v ip >/dev/null 2>&1 || want+=(iproute2)
command -v aarch64-linux-gnu-g++ >/dev/null 2>&1 || want+=(g++-aarch64-linux-gnu)
# The loopback ssh device of tests/devices/ logs in as this unprivileged user (sshd runs as it).
if [ "$(id -u)" = 0 ] && ! id etriage-device >/dev/null 2>&1; then
    useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /bin/sh etriage-device \
        || echo "system-deps: could not create the user etriage-device" >&2
fi
[ ${#want[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "system-deps: installing ${want[*]}"
    apt-get update -qq >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null \
        || echo "system-deps: could not install ${want[*]}; tests needing them will skip" >&2
else
    echo "system-deps: missing ${want[*]} (not root); tests needing them will skip" >&2
fi
exit 0
