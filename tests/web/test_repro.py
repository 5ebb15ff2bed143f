"""A probe's standalone script (tasks/probes/standalone.py, served by bot/repro.py) is what a
contributor runs in their own ExecuTorch: it imports nothing of etriage, exits 1 when the
failure reproduces (the demo's regression patched into the installed ExecuTorch) and 0 when it
does not, and 2 where it cannot run at all."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tasks.probes import standalone
from tasks.probes.records import SUITES

# Runs the script as `python etriage_probe_x.py` would, with every import of etriage's own
# packages refused: the script must not need them.
BLOCKED = """
import importlib.abc, runpy, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("tasks", "bot", "triage_rules", "etriage"):
            raise ImportError(f"the script imported etriage's {name}")
        return None
sys.meta_path.insert(0, Refuse())
sys.argv = [sys.argv[1]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_script(tmp_path: Path, suite: str, probe: str, *, env=None, python_flags=()) -> subprocess.CompletedProcess:
    path = tmp_path / standalone.file_name(suite, probe)
    path.write_text(standalone.script(suite, probe))
    return subprocess.run([sys.executable, *python_flags, "-c", BLOCKED, str(path)], cwd=tmp_path,
                          env=env or {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("suite", SUITES)
def test_every_probe_has_a_script_that_parses_and_holds_its_sources(suite):
    names = standalone.probes_of(suite)
    assert names, suite
    for probe in names:
        text = standalone.script(suite, probe)
        compile(text, standalone.file_name(suite, probe), "exec")
        assert "tasks.probes" not in text.split("SOURCES = {}")[1]  # every import of it renamed
        assert f'registry("{suite}") if p.name == "{probe}"' in text


@pytest.mark.parametrize("suite, probe", [("multi_method", "nope"), ("nope", "x"), ("multi_method", "../x"),
                                          ("multi_method", "Per_Method")])
def test_an_unknown_probe_has_no_script(suite, probe):
    with pytest.raises(standalone.UnknownProbe):
        standalone.script(suite, probe)


def test_without_torch_the_script_says_it_cannot_run_here_and_exits_2(tmp_path):
    done = run_script(tmp_path, "multi_method", "per_method_partitioners", python_flags=("-S",))  # no site-packages
    assert done.returncode == 2, done.stderr
    assert done.stdout.startswith("SKIPPED multi_method/per_method_partitioners: cannot run here: ")
    assert "etriage's" not in done.stdout + done.stderr


@pytest.mark.executorch
def test_the_script_reproduces_the_demos_regression_in_an_executorch_with_it(tmp_path):
    from tests.probes.conftest import REGRESSIONS, overlay_env, regression_overlay

    root = regression_overlay(REGRESSIONS / "multi_method_first_partitioner_for_all.patch", tmp_path / "patched")
    done = run_script(tmp_path, "multi_method", "per_method_partitioners", env=overlay_env(root))
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert "FAILED multi_method/per_method_partitioners" in done.stdout
    assert ("ProbeFailure: [multi_method_lowering] two methods on XNNPACK + portable: partitioner map routed "
            "wrongly: method 'decode' was given NoDelegationPartitioner") in done.stdout


@pytest.mark.executorch
@pytest.mark.slow
def test_the_script_passes_on_the_installed_executorch(tmp_path):
    done = run_script(tmp_path, "multi_method", "per_method_partitioners",
                      env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert done.stdout.startswith("PASSED multi_method/per_method_partitioners")
