"""Never blame the PR for an environment: a torch pin that cannot be had, a merge base that
cannot be built, a merge base whose environment is not healthy. Each ends the run with an
environment verdict that says what, never `new` and never `pre_existing`."""
from __future__ import annotations

from pathlib import Path

import pytest

from tasks.pipeline.report import to_markdown
from tasks.pipeline.run import TriageOptions, triage

pytestmark = [pytest.mark.executorch, pytest.mark.timeout(900)]


def run(repo, head, data_dir, base="main"):
    messages = []
    report = triage(TriageOptions(repo=repo.path, base=base, head=head, data_dir=data_dir, suites=["probes"],
                                  targets=["host"]), progress=messages.append)
    return report, messages


def comment(path: str):
    def edit(repo: Path) -> None:
        target = repo / path
        target.write_text("# etriage: a comment\n" + target.read_text())
    return edit


def test_a_torch_pin_that_cannot_be_had_is_an_environment_verdict_naming_it(moved_repo, tmp_path, monkeypatch):
    # pip sees no index and an empty folder of wheels: the registry has no such torch, for real
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "no-wheels"))
    (tmp_path / "no-wheels").mkdir()

    def pin(repo: Path) -> None:
        (repo / "torch_pin.py").write_text('TORCH_VERSION = "2.99.0"\n')
        comment("exir/backend/backend_api.py")(repo)

    head = moved_repo.branch("torch-pin", edit=pin)
    report, _ = run(moved_repo, head, tmp_path / "data")

    assert report.summary["new"] == 0 and report.summary["pre_existing"] == 0
    [verdict] = report.results
    assert verdict.verdict == "environment" and verdict.failure.environment
    assert "torch 2.99.0" in verdict.primary_line and "torch_pin.py" in verdict.primary_line, verdict.primary_line
    assert "ERROR:" in verdict.primary_line  # pip's own words: no such version here (or, with this
    # machine's constraints file, a conflict with torch<=2.14.1)
    assert report.build.status == "environment" and report.build.environment.torch_pin == "2.99.0"
    assert all(s.status == "not_run" for s in report.suites) and report.suites
    assert "torch 2.99.0" in to_markdown(report)


def test_a_merge_base_that_cannot_be_built_is_an_environment_verdict(moved_repo, tmp_path):
    # the merge base changes what feeds the compiled parts (a kernel table), so its extension
    # modules must be built from its sources, and this tree (the package, not the repository)
    # has none to build from
    broken_base = moved_repo.branch("kernels-yaml", edit=comment("kernels/portable/functions.yaml"))
    head = type(moved_repo)(moved_repo.path, broken_base).branch("on-kernels-yaml",
                                                                 edit=comment("exir/backend/backend_api.py"))
    report, messages = run(moved_repo, head, tmp_path / "data", base=broken_base)

    assert report.summary["new"] == 0 and report.summary["pre_existing"] == 0
    [verdict] = report.results
    assert verdict.verdict == "environment"
    assert verdict.primary_line.startswith(f"could not build the merge base {broken_base[:12]}: pybind"), verdict.primary_line
    assert "CMakeLists.txt" in verdict.primary_line or "configure failed" in verdict.primary_line


def test_a_merge_base_whose_environment_is_not_healthy_is_never_pre_existing(moved_repo, tmp_path):
    # the merge base's Python loads an extension module its compiled parts do not have: main's
    # rename of the pybindings to `executorch.extension.pybindings._C`, laid over 1.4.1's
    # `_portable_lib` (../shared/executorch-src/README.md: what main whole over the wheel does)
    def drop(repo: Path) -> None:
        path = repo / "extension/pybindings/portable_lib.py"
        path.write_text(path.read_text().replace("from executorch.extension.pybindings._portable_lib import",
                                                 "from executorch.extension.pybindings._C import"))

    broken_base = moved_repo.branch("no-portable-lib", edit=drop)
    head = type(moved_repo)(moved_repo.path, broken_base).branch("on-no-portable-lib",
                                                                 edit=comment("exir/backend/backend_api.py"))
    report, messages = run(moved_repo, head, tmp_path / "data", base=broken_base)

    assert report.results, report.summary  # head fails as the base would: the probes cannot load the runtime
    assert {v.verdict for v in report.results} == {"environment"}, [(v.test, v.verdict) for v in report.results]
    assert report.base_environment is not None, messages
    assert report.base_environment.healthy is False
    assert "No module named 'executorch.extension.pybindings._C'" in report.base_environment.health
    assert any(note.startswith(f"could not build the merge base {broken_base[:12]}: its environment is not healthy")
               for note in report.plan.notes), report.plan.notes
