"""The installation token reaches git only by one command's environment
(GIT_CONFIG_COUNT/KEY/VALUE: `http.<url>/.extraHeader`): never in an argv (read from
/proc/<pid>/cmdline while a fetch is held by the double), a remote URL, the mirror's files or an
error message. The double refuses git without it, so the fetch also proves it was sent."""
from __future__ import annotations

import base64
import re
import subprocess
import threading
from pathlib import Path

from tests.repos.conftest import TOKEN, UPSTREAM, git, git_processes, token

SECRETS = (TOKEN.encode(), base64.b64encode(f"x-access-token:{TOKEN}".encode()))


def _processes_with_environ() -> list[tuple[str, bytes]]:
    """(cmdline, environ) of this test's git descendants."""
    found, ours = [], set(git_processes())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if cmdline in ours:
            found.append((cmdline, environ))
    return found


def test_the_token_is_in_no_argv_url_or_file_of_the_mirror(origin, repos):
    hold = origin.double.hold("POST", r"/git-upload-pack$")  # the first command's (ls-remote) ls-refs
    errors = []

    def run():
        try:
            with repos.checkout(origin.pull(), token):
                pass
        except Exception as error:  # reported below, in the test's thread
            errors.append(error)

    worker = threading.Thread(target=run)
    worker.start()
    try:
        assert hold.reached.wait(60), "the fetch never reached the double"
        held = _processes_with_environ()
    finally:
        hold.release()
        worker.join(60)
    assert not errors, errors
    assert held, "no git process was running during the held fetch"
    assert any(" ls-remote origin " in cmd for cmd, _ in held), [cmd for cmd, _ in held]
    assert any("git-remote-http origin " in cmd for cmd, _ in held)  # the URL it was given: no userinfo
    for cmdline, environ in held:
        assert not any(secret.decode() in cmdline for secret in SECRETS), cmdline
    # the positive control: the credential is there, by environment, as an extra header
    header = re.compile(rb"\0GIT_CONFIG_VALUE_\d+=Authorization: Basic " + re.escape(SECRETS[1]) + rb"\0")
    assert any(header.search(b"\0" + environ) for _, environ in held)

    mirror = repos.mirror_path(UPSTREAM)
    assert git(mirror, "config", "remote.origin.url") == f"{origin.double.url}/{UPSTREAM}.git"
    for path in [p for p in repos.root.rglob("*") if p.is_file()]:
        data = path.read_bytes()
        assert not any(secret in data for secret in SECRETS), path
    fetched = [r for r in origin.requests("GET") if r.status == 200]
    assert fetched and all("Authorization" not in r.headers for r in origin.double.requests)


def test_git_is_refused_without_the_token(origin, tmp_path):
    """The double checks every git request: an anonymous clone of the private repository fails."""
    clone = tmp_path / "anonymous"
    proc = subprocess.run(
        ["git", "clone", "-q", "--bare", f"{origin.double.url}/{UPSTREAM}.git", str(clone)],
        capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent",
                                             "GIT_TERMINAL_PROMPT": "0"})
    assert proc.returncode != 0 and "could not read Username" in proc.stderr
    assert [r.status for r in origin.requests("GET")] == [401]
