"""What a run writes is hostile, and the worker reads it outside every sandbox limit: each reader
is bounded and each bad file has one outcome.

- JUnit with one control byte: that suite is crashed with the parser's reason; a suite beside it
  (the probes, whose own writer escapes the byte) keeps its results. Both run in the real sandbox.
- JUnit with an entity bomb (billion laughs) or an external entity: refused, never expanded.
- A 10 MB multi-line <failure> body: parsed in linear time (it was quadratic: 656 s for 13 MB).
- JUnit over the cap: refused before it is read.
- A sparse 2 GiB log (a few KB on disk): tailed with bounded memory, measured in a child process.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tasks.pipeline import suites
from tasks.pipeline.sandbox import Sandbox, scrubbed_env, tail_text
from tasks.pipeline.tables import load_tables
from tasks.probes.junit import to_junit
from tasks.probes.records import ProbeResult
from tasks.records import BuildResult
from triage_rules.junit import MAX_BYTES, JUnitError, read_junit

CONTROL = (b'<?xml version="1.0" encoding="utf-8"?>\n<testsuite name="pytest" tests="2">\n'
           b'<testcase classname="a" name="test_ok" time="0.1"/>\n'
           b'<testcase classname="a" name="test_bad" time="0.1"><failure message="x">boom \x01 here</failure>'
           b'</testcase>\n</testsuite>\n')
LAUGHS = (b'<?xml version="1.0"?>\n<!DOCTYPE lolz [<!ENTITY lol "lol">'
          + b"".join(b'<!ENTITY lol%d "%s">' % (i, (b"&lol%d;" % (i - 1) if i > 1 else b"&lol;") * 10)
                     for i in range(1, 10))
          + b']>\n<testsuite><testcase classname="a" name="t"><failure message="m">&lol9;</failure>'
            b'</testcase></testsuite>\n')
EXTERNAL = (b'<?xml version="1.0"?>\n<!DOCTYPE t [<!ENTITY x SYSTEM "file:///etc/passwd">]>\n'
            b'<testsuite><testcase classname="a" name="t"><failure message="m">&x;</failure></testcase></testsuite>\n')


@pytest.mark.parametrize("data,why", [
    (CONTROL, "malformed JUnit XML at line 4, column"),
    (LAUGHS, "refused JUnit XML"),
    (EXTERNAL, "refused JUnit XML"),
    (b"<testsuite><testcase name='t'>", "malformed JUnit XML"),
    (b"<html/>", "not JUnit XML"),
])
def test_hostile_junit_is_refused_with_a_reason(tmp_path, data, why):
    path = tmp_path / "junit.xml"
    path.write_bytes(data)
    start = time.monotonic()
    with pytest.raises(JUnitError, match=why):
        read_junit(path)
    assert time.monotonic() - start < 1


def test_junit_over_the_cap_is_not_read(tmp_path):
    path = tmp_path / "junit.xml"
    with open(path, "wb") as handle:
        handle.truncate(MAX_BYTES + 1)  # sparse: the cap is checked before a byte is read
    with pytest.raises(JUnitError, match="over the 64 MiB that are read"):
        read_junit(path)


def test_a_10_mb_multi_line_failure_body_parses_in_linear_time(tmp_path):
    body = "".join(f"E   line {i:07d} of a long traceback, with some text to carry\n" for i in range(170_000))
    assert len(body) > 10_000_000
    path = tmp_path / "junit.xml"
    path.write_text('<?xml version="1.0"?>\n<testsuite><testcase classname="a" name="t">'
                    f'<failure message="m">{body}</failure></testcase></testsuite>\n')
    start = time.monotonic()
    [case] = read_junit(path)
    seconds = time.monotonic() - start
    assert case.outcome == "failed" and case.text == body
    assert seconds < 3, f"{seconds:.2f} s for 10 MB"  # measured 0.2-0.4 s; the `+=` per line took minutes


def _write_command(junit: Path, data: bytes) -> list[str]:
    """A run that writes exactly `data` as its JUnit file (from inside the sandbox)."""
    return [sys.executable, "-c", "import sys; open(sys.argv[1], 'wb').write(bytes.fromhex(sys.argv[2]))",
            str(junit), data.hex()]


def test_a_malformed_junit_crashes_its_suite_and_the_probes_keep_their_results(tmp_path):
    tables = load_tables()
    build = BuildResult(status="ok", kind="environment", commit="c" * 40, package_dir=str(tmp_path))
    sandbox = Sandbox()
    if sandbox.problem():
        pytest.skip(f"no sandbox here: {sandbox.problem()}")
    probes_junit = to_junit([ProbeResult("graph_checks", "delegates", "failed",
                                         diagnosis="the module said \x1b[31mred\x1b[0m and \x00", module="exir")])
    outcomes = {}
    for name, data in (("multi_method", CONTROL), ("probes", probes_junit)):
        run = suites.SuiteRun(tables.suites[name], build, "host", tmp_path, sandbox=sandbox, timeout=60)
        junit = run.work_dir() / "junit.xml"
        env = scrubbed_env(run.work_dir(), sandbox=sandbox, python=sys.executable)
        outcomes[name] = suites.execute(run, _write_command(junit, data), env, junit)

    crashed = outcomes["multi_method"]
    assert crashed.status == "crashed" and not crashed.tests
    assert crashed.reason.startswith("unreadable JUnit results (malformed JUnit XML at line 4, column"), crashed.reason
    probes = outcomes["probes"]
    assert probes.status == "ran", probes.reason
    [test] = probes.tests
    assert test.outcome == "failed" and "\\x1b[31mred" in test.text and "\\x00" in test.text


TAIL_CHILD = """
import json, resource, sys
from pathlib import Path
from tasks.pipeline.sandbox import Completed
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
text = Completed(1, 0.0, Path(sys.argv[1])).tail(6000)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"before_kib": before, "after_kib": after, "tail": text}))
"""


@pytest.mark.parametrize("where", ["end", "start"])
def test_a_sparse_2_gib_log_is_tailed_with_bounded_memory(tmp_path, where):
    log = tmp_path / "run.log"
    real = "".join(f"[run] line {i} of the real output\n" for i in range(200)).encode()  # ~7 KB
    with open(log, "wb") as handle:
        if where == "start":
            handle.write(real)
        handle.truncate(2 << 30)
        if where == "end":
            handle.seek(2 << 30)
            handle.write(real)
    assert log.stat().st_size >= 2 << 30 and log.stat().st_blocks * 512 < 1 << 20  # sparse: < 1 MiB on disk

    done = subprocess.run([sys.executable, "-c", TAIL_CHILD, str(log)], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2], timeout=60)
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout)
    grew_kib = measured["after_kib"] - measured["before_kib"]
    assert grew_kib < 10 * 1024, measured  # reading it whole took 4.3 GB
    if where == "end":
        assert measured["tail"].endswith("[run] line 199 of the real output\n")
    else:  # the end is one hole: nothing of it is text
        assert measured["tail"] == ""
    assert tail_text(tmp_path / "absent.log", 100) == ""
