"""Planning from real git diffs (renames, deletions, binary files) through the real tables."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tasks.pipeline.gitio import GitError
from tasks.pipeline.plan import plan_change
from tasks.pipeline.tables import DEFAULT_DIR, Area, Recipe, Selection, Suite, TableError, TargetSpec, load_tables
from triage_rules import catalogue
from tasks.sample_repo import SampleRepo


@pytest.fixture(scope="module")
def small_repo(tmp_path_factory, gitkit) -> SampleRepo:
    repo = gitkit.init_repo(tmp_path_factory.mktemp("small") / "repo")
    for path in ("exir/backend/backend_api.py", "backends/qualcomm/qnn_preprocess.py",
                 "backends/xnnpack/partition/xnnpack_partitioner.py", "docs/source/intro.md",
                 "README.md", "CMakeLists.txt", "runtime/core/evalue.cpp", "examples/demo.py"):
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(f"# {path}\n")
    return SampleRepo(repo, gitkit.commit_all(repo, "base"))


def write(path: str, text: str = "x = 1\n"):
    def edit(repo: Path):
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    return edit


def rename(old: str, new: str):
    return lambda repo: (repo / old).rename(repo / new)


def delete(path: str):
    return lambda repo: (repo / path).unlink()


def binary(path: str):
    return lambda repo: (repo / path).write_bytes(bytes(range(256)) * 4)


CASES = [
    # name, edit, backends, suites contain, suites exclude, recipes, docs_only
    ("docs", write("docs/source/intro.md", "# new\n"), [], [], ["multi_method"], [], True),
    ("readme", write("README.md", "hi\n"), [], [], ["multi_method"], [], True),
    ("exir", write("exir/backend/backend_api.py"), ["portable", "qualcomm", "xnnpack"],
     ["multi_method", "probes", "qnn", "qnn_probes"], ["index_put"], ["overlay"], False),
    # the QNN suites (~60 s of HTP lowering) only for the exir paths QNN lowering reads
    ("exir-dialects", write("exir/dialects/edge/_ops.py"), ["portable", "qualcomm", "xnnpack"],
     ["multi_method", "probes"], ["qnn", "qnn_probes", "index_put"], ["overlay"], False),
    # index_put (~65 s) only for the mutable-buffer path: quantizers, passes, partitioners
    ("quantizer", write("backends/xnnpack/quantizer/xnnpack_quantizer.py"), ["xnnpack"],
     ["index_put", "multi_method", "probes"], ["qnn"], ["overlay"], False),
    ("passes", write("exir/passes/insert_write_back_for_buffers_pass.py"), ["portable", "qualcomm", "xnnpack"],
     ["index_put", "mutable_buffer"], [], ["overlay"], False),
    ("qnn", write("backends/qualcomm/qnn_preprocess.py"), ["qualcomm"],
     ["qnn", "qnn_probes", "multi_method"], ["index_put"], ["overlay"], False),
    ("xnnpack-rename", rename("backends/xnnpack/partition/xnnpack_partitioner.py",
                              "backends/xnnpack/partition/partitioner.py"),
     ["xnnpack"], ["index_put"], ["qnn"], ["overlay"], False),
    ("delete", delete("exir/backend/backend_api.py"), ["portable", "qualcomm", "xnnpack"],
     ["multi_method"], [], ["overlay"], False),
    # a top-level CMake file is in every recipe's build; a runtime .cpp only in the portable one
    ("cmake", write("CMakeLists.txt", "project(x)\n"), ["portable", "qualcomm", "xnnpack"],
     ["multi_method"], [], ["portable", "xnnpack", "qnn"], False),
    ("cpp", write("runtime/core/evalue.cpp", "int x;\n"), ["portable", "qualcomm", "xnnpack"],
     ["multi_method", "cxx_tests"], [], ["portable", "cxx_tests"], False),  # + its C++ tests' binaries
    ("xnnpack-cpp", write("backends/xnnpack/runtime/XNNCompiler.cpp", "int x;\n"), ["xnnpack"],
     ["multi_method"], [], ["xnnpack"], False),
    ("qnn-cpp", write("backends/qualcomm/runtime/QnnManager.cpp", "int x;\n"), ["qualcomm"],
     ["multi_method"], [], ["qnn"], False),
    # Python outside the backends that have suites: only the tests selected for it, per test
    ("examples", write("examples/demo.py"), [], ["selected"], ["multi_method"], ["overlay"], False),
    ("arm", write("backends/arm/tosa/partitioner.py"), [], ["selected"], ["multi_method", "probes"],
     ["overlay"], False),
]


@pytest.mark.parametrize("name,edit,backends,has,lacks,recipes,docs_only", CASES, ids=[c[0] for c in CASES])
def test_plan_maps_paths_to_backends_suites_and_recipes(small_repo, gitkit, name, edit, backends, has, lacks,
                                                        recipes, docs_only):
    head = small_repo.branch(name, edit=edit)
    plan = plan_change(small_repo.path, "main", head, load_tables())
    assert plan.backends == backends
    assert set(has) <= set(plan.suites) and not set(lacks) & set(plan.suites)
    assert plan.recipes == recipes
    assert plan.docs_only is docs_only
    if "index_put" in lacks and {"portable", "xnnpack"} & set(backends):
        assert any("index_put" in note for note in plan.notes), plan.notes  # says why it did not run
    if "qnn_probes" in lacks and "qualcomm" in backends:
        assert any("qnn_probes" in note for note in plan.notes), plan.notes
    assert plan.merge_base == gitkit.git(small_repo.path, "rev-parse", "main").strip()
    if not plan.suites:
        assert plan.notes  # says why nothing runs


def test_plan_records_renames_deletions_and_binary_files(small_repo, gitkit):
    def edit(repo: Path):
        rename("backends/xnnpack/partition/xnnpack_partitioner.py", "backends/xnnpack/partition/p.py")(repo)
        delete("examples/demo.py")(repo)
        binary("exir/backend/blob.bin")(repo)
    plan = plan_change(small_repo.path, "main", small_repo.branch("mixed", edit=edit), load_tables())
    by_path = {f.path: f for f in plan.changed_files}
    assert by_path["backends/xnnpack/partition/p.py"].status == "R"
    assert by_path["backends/xnnpack/partition/p.py"].old_path == "backends/xnnpack/partition/xnnpack_partitioner.py"
    assert by_path["examples/demo.py"].status == "D"
    assert by_path["exir/backend/blob.bin"].binary and by_path["exir/backend/blob.bin"].status == "A"


@pytest.mark.parametrize("repo_arg,rev,expected", [
    ("missing", "main", "no such directory"),
    ("not-git", "main", "not a git repository"),
    ("repo", "no-such-branch", "unknown revision 'no-such-branch'"),
])
def test_bad_input_is_one_clear_error(small_repo, tmp_path, repo_arg, rev, expected):
    (tmp_path / "not-git").mkdir()
    repo = {"missing": tmp_path / "missing", "not-git": tmp_path / "not-git", "repo": small_repo.path}[repo_arg]
    with pytest.raises(GitError, match=expected):
        plan_change(repo, rev, "main", load_tables())


def test_unknown_keys_in_tables_are_rejected_with_the_file_name(tmp_path):
    tables = tmp_path / "tables"
    shutil.copytree(DEFAULT_DIR, tables)
    suites = tables / "suites.yaml"
    suites.write_text(suites.read_text().replace("    kind: probes\n", "    kind: probes\n    timeout_s: 3\n"))
    with pytest.raises(TableError, match=r"suites\.yaml:\d+: suites\.probes: unknown key 'timeout_s'"):
        load_tables(tables)


def test_every_key_a_table_may_set_has_its_record_field():
    """load_tables hands each entry's keys to its record by name: a key added to a model
    (triage_rules/catalogue.py) needs the field on the record, and this says which."""
    for model, record in [(catalogue.AreaYaml, Area), (catalogue.SuiteYaml, Suite), (catalogue.SelectionYaml, Selection),
                          (catalogue.RecipeYaml, Recipe), (catalogue.TargetYaml, TargetSpec)]:
        assert set(model.model_fields) <= set(record.__dataclass_fields__), record.__name__


def test_default_tables_load():
    tables = load_tables()
    assert {"multi_method", "mutable_buffer", "index_put", "probes", "qnn"} <= set(tables.suites)
    assert tables.targets["qnn-htp-sim"].requires_env == "QNN_SDK_ROOT"


def test_a_package_missing_at_head_and_base_alike_is_the_environments():
    from tasks.pipeline import compare
    from tasks.records import TestResult

    def failed(test, text):
        return TestResult("selected", test, "host", "error", message="collection failed", text=text)

    key = ("selected", "host", "backends/arm/test/test_x.py")
    lacks = "E   ModuleNotFoundError: No module named 'tosa_serializer'"
    removed = "E   ModuleNotFoundError: No module named 'executorch.exir.passes.gone'"
    cases = [(lacks, lacks, "environment"),  # the worker lacks it at both: not the change's
             (lacks, None, "new"),  # the change added the import: the change's
             (removed, removed, "pre_existing")]  # ExecuTorch's own module: never the environment's
    for head_text, base_text, expected in cases:
        head = {key: failed(key[2], head_text)}
        base = {key: failed(key[2], base_text)} if base_text else {}
        [verdict] = compare.decide(base, head, {key: []}, {})
        assert verdict.verdict == expected, (head_text, base_text)


def test_the_repositorys_paths_map_a_path_to_a_backend_before_the_tables(small_repo):
    head = small_repo.branch("vendored", edit=write("third-party/qnn/glue.py"))
    tables = load_tables()
    assert plan_change(small_repo.path, "main", head, tables).backends == []  # the tables: area `other`
    plan = plan_change(small_repo.path, "main", head, tables, path_backends={"third-party/qnn/*": "qualcomm"})
    assert plan.backends == ["qualcomm"] and "multi_method" in plan.suites


@pytest.mark.parametrize("compiled, has_adaptor, expected", [
    ("wheel", True, ""),
    ("built", False, "the environment's compiled parts (built from the commit's sources) have no "
                     "backends/qualcomm/python/PyQnnManagerAdaptor*.so"),
], ids=["wheel", "built-from-main"])
def test_a_qnn_suite_is_not_run_on_compiled_parts_without_qnns_adaptors(tmp_path, compiled, has_adaptor, expected):
    """ExecuTorch main's compiled parts, built by the pybind recipe, have no QNN adaptors (they need
    the QNN SDK's headers): its QNN suites crashed on the import, an environment failure on every
    pull request. They are not run, and the report says why."""
    from tasks.pipeline.run import lacking_compiled
    from tasks.records import BuildResult, CommitEnvironment

    package = tmp_path / "executorch"
    (package / "backends/qualcomm/python").mkdir(parents=True)
    if has_adaptor:
        (package / "backends/qualcomm/python/PyQnnManagerAdaptor.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    build = BuildResult(status="ok", kind="environment", commit="h" * 40, package_dir=str(package),
                        environment=CommitEnvironment(commit="h" * 40, status="ok", compiled=compiled))
    tables = load_tables()
    for name in ("qnn", "qnn_probes"):
        assert lacking_compiled(tables.suites[name], build) == expected
    assert lacking_compiled(tables.suites["probes"], build) == ""  # needs nothing compiled by name
