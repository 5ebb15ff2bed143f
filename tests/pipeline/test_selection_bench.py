"""The selection's mutation benchmark (bench/selection.py) on a real small module: the
installed executorch, the bot's plan and selection, real pytest processes against an overlay
with the mutated file. bench/mutants.py's operators are checked on a table of sources."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULE = "exir/dialects/edge/dtype/utils.py"  # one function; its tests run in seconds


def _load_bench():
    spec = importlib.util.spec_from_file_location("bench_selection", ROOT / "bench" / "selection.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


selection = _load_bench()
mutants = selection.mutation

SOURCE = '''LIMIT = 0


def pick(items, flag=True):
    """The first item, or the smaller of the first two."""
    if len(items) > 1:
        return min(items[0], items[1])
    return items[0]
'''


@pytest.mark.parametrize("operator,line,expected", [
    ("negate_condition", 6, "    if not (len(items) > 1):\n"),
    ("flip_comparison", 6, "    if (len(items) <= 1):\n"),
    ("swap_constant", 6, "    if len(items) > 0:\n"),
    ("swap_arguments", 7, "        return min(items[1], items[0])\n"),
    ("drop_statement", 8, "    pass\n"),
    ("early_return", 8, "    return\n    return items[0]\n"),
])
def test_each_operator_makes_one_small_change_in_a_function_body(operator, line, expected):
    found = [m for m in mutants.candidates(SOURCE, "m.py") if m.operator == operator and m.line == line]
    assert found, f"no {operator} mutant on line {line}"
    mutated = found[0].apply(SOURCE)
    assert expected in mutated
    changed = [a for a, b in zip(SOURCE.splitlines(), mutated.splitlines()) if a != b]
    assert len(changed) == 1 and mutated.count("\n") - SOURCE.count("\n") in (0, 1)


def test_module_level_code_defaults_and_docstrings_are_never_mutated():
    found = mutants.candidates(SOURCE, "m.py")
    assert found and all(m.function == "pick" for m in found)
    assert all(m.mutated(SOURCE) not in (None, SOURCE) for m in found)
    assert min(m.line for m in found) == 6  # not LIMIT = 0 (line 1), not flag=True, not the docstring
    assert len({m.key for m in found}) == len(found)


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    bench = selection.Bench(selection.Options(data_dir=tmp_path_factory.mktemp("selection-bench"), seed=7),
                            progress=lambda message: None)
    yield bench
    bench.close()


@pytest.fixture(scope="module")
def measured(bench):
    return selection.evaluate_module(bench, MODULE, quota=2, tries=4)


@pytest.mark.executorch
def test_a_killed_mutant_is_killed_by_a_test_that_runs_its_line(bench, measured):
    killable = [m for m in measured.mutants if m.status in ("killed", "missed")]
    assert measured.status == "measured" and killable, [m.status for m in measured.mutants]
    by_key = {m.key: m for m in mutants.candidates(_source(bench), MODULE)}
    for result in killable:
        covering = selection.covering_tests(bench, list(bench.baselines), by_key[result.key])
        assert result.killers and set(result.killers) <= covering
        assert result.covering >= len(result.killers)


@pytest.mark.executorch
def test_dropping_a_covered_statement_is_killed_and_an_uncovered_one_is_not(bench, measured):
    source = _source(bench)
    drops = [m for m in mutants.candidates(source, MODULE) if m.operator == "drop_statement"
             and "result.append(ret.dtype)" in m.description]
    groups = list(bench.baselines)
    covered = [m for m in drops if selection.covering_tests(bench, groups, m)]
    uncovered = [m for m in drops if not selection.covering_tests(bench, groups, m)]
    # the Tensor branch runs in the dtype tests; the TensorList branch in none of them
    assert covered and uncovered, [(m.line, bool(selection.covering_tests(bench, groups, m))) for m in drops]
    learned = bench.learned(list(bench.baselines.values()))

    killed = selection.check_mutant(bench, measured, covered[-1], source, learned)
    assert killed.status in ("killed", "missed") and killed.killers

    not_run = selection.check_mutant(bench, measured, uncovered[0], source, learned)
    assert not_run.status == "not_covered" and not not_run.killers
    # and no relevant test sees it indeed: every test of the module's own relevant files passes
    root = bench.work / "overlay-uncovered"
    head = bench.repo.branch("uncovered", edit=lambda repo: (repo / MODULE).write_text(uncovered[0].apply(source)))
    selection.overlay.build_overlay(bench.repo.path, head, [selection.ChangedFile(MODULE, "M")], bench.installed,
                                    root, lambda p: True)
    relevant = [t for g in groups if g.path.startswith("exir/dialects/") for t in bench.baselines[g].passed()]
    assert relevant
    assert selection.run_kill(bench, root, relevant, groups) == ([], True)


@pytest.mark.executorch
def test_the_killers_pass_on_the_unmutated_tree_run_the_same_way(bench, measured):
    """A killer is the mutant's doing, not the way the bench runs a few tests of a file alone."""
    killers = sorted({k for m in measured.mutants for k in m.killers})
    assert killers
    assert selection.run_kill(bench, bench.base_overlay, killers, list(bench.baselines)) == ([], True)


@pytest.mark.executorch
def test_recall_and_time_are_counted_over_the_killable_mutants(bench, measured):
    summary = selection.summarise(bench, [measured], bench.options, {}, "", 1.0, quick=True)
    killable = [m for m in measured.mutants if m.status in ("killed", "missed")]
    assert summary["killable"] == len(killable) == summary["mutants"]["killed"] + summary["mutants"]["missed"]
    assert summary["recall"] == round(summary["killed_by_selection"] / summary["killable"], 3)
    assert summary["areas"]["exir"]["killable"] == len(killable)
    assert 0 < summary["time_ratio"] <= 1  # the selection is part of the relevant set
    # with the map (the baselines' lines): every killable mutant judged, its cost a part of the whole
    assert summary["with_map"]["killed"] == sum(m.map_status == "killed" for m in killable)
    assert all(m.map_status in ("killed", "missed") for m in killable)
    assert 0 < summary["with_map"]["time_ratio"] <= 1
    assert summary["discarded_uncovered"] == measured.uncovered > 0
    text = selection.render(summary)
    assert f"{summary['killed_by_selection']} of {summary['killable']} killable" in text


def _source(bench) -> str:
    return (bench.repo.path / MODULE).read_text()
