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
