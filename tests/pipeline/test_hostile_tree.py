"""The issue's tree attacks, made with git's own plumbing (a tree object written entry by entry,
as `git mktree` or `hash-object --literally` writes it; `git fsck` only warns about such names)
and triaged by the real pipeline on the sample repository:

- a path with `..` (`exir/../../../../tmp/x.py`, and one deep enough to reach `/` from anywhere),
  an absolute path, a `.git` component in any letter case, `.` as a component, a newline, a name
  that is not UTF-8: the triage is refused with one environment line, nothing of the change is
  laid or run, and no file appears outside the worker's roots;
- the same paths given straight to each writer (the overlay, the native checkout's export and
  its incremental update): each refuses before writing anything;
- a committed symlink to /etc/passwd (and to /etc) and a gitlink: the triage completes, the link
  is reported as a link and never followed; the native checkout keeps it as a link.

NUL cannot be in a path git stores (a tree entry's name ends at NUL): `treepaths.check` refuses it
anyway (tests/sandbox/test_tree_paths.py).
"""
from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from tasks.pipeline import native, overlay, treepaths
from tasks.pipeline.report import to_markdown
from tasks.pipeline.plan import plan_change
from tasks.pipeline.run import TriageOptions, triage
from tasks.pipeline.tables import DEFAULT_DIR, load_tables
from tasks.sample_repo import GIT_ENV

pytestmark = pytest.mark.executorch

MARK = f"etriage-escaped-{uuid.uuid4().hex[:12]}"  # the file an attack would leave, unique to this session


def git(repo: Path, *args: str, input: bytes | None = None) -> bytes:
    proc = subprocess.run(["git", "-C", str(repo), *args], input=input, capture_output=True, env=GIT_ENV)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return proc.stdout


def _entries(repo: Path, tree: bytes | None) -> dict[bytes, tuple[bytes, bytes]]:
    out = {}
    for rec in (git(repo, "ls-tree", "-z", tree.decode()).split(b"\0") if tree else []):
        if rec:
            meta, name = rec.split(b"\t", 1)
            mode, _kind, sha = meta.split()
            out[name] = (mode, sha)
    return out


def _write_tree(repo: Path, entries: dict[bytes, tuple[bytes, bytes]]) -> bytes:
    """A tree object from raw entries, whatever their names (what `git mktree` refuses, like a
    name with a slash, `hash-object --literally` stores)."""
    def order(item):
        name, (mode, _sha) = item
        return name + (b"/" if mode.lstrip(b"0") == b"40000" else b"")
    data = b"".join(mode.lstrip(b"0") + b" " + name + b"\0" + bytes.fromhex(sha.decode())
                    for name, (mode, sha) in sorted(entries.items(), key=order))
    return git(repo, "hash-object", "-t", "tree", "--literally", "-w", "--stdin", input=data).strip()


def _graft(repo: Path, tree: bytes | None, components: list[bytes], mode: bytes, sha: bytes) -> bytes:
    entries = _entries(repo, tree)
    if len(components) == 1:
        entries[components[0]] = (mode, sha)
    else:
        sub = entries.get(components[0])
        inner = sub[1] if sub and sub[0].lstrip(b"0") == b"40000" else None
        entries[components[0]] = (b"040000", _graft(repo, inner, components[1:], mode, sha))
    return _write_tree(repo, entries)


def hostile_commit(repo: Path, parent: str, grafts: list[tuple[list[bytes], bytes, bytes]]) -> str:
    """A commit on `parent` whose tree has each (components, mode, content-or-sha) added."""
    tree = git(repo, "rev-parse", f"{parent}^{{tree}}").strip()
    for components, mode, content in grafts:
        sha = content if mode == b"160000" else git(repo, "hash-object", "-w", "--stdin", input=content).strip()
        tree = _graft(repo, tree, components, mode, sha)
    return git(repo, "commit-tree", tree.decode(), "-p", parent, "-m", "hostile tree").decode().strip()


PAYLOAD = b"open('/tmp/" + MARK.encode() + b"-ran', 'w').write('ran')\n"
DEEP = [b"exir", *[b".."] * 24, b"tmp", MARK.encode() + b".py"]
ATTACKS = {  # name -> (path components, what the refusal names)
    "dot-dot (the issue's)": ([b"exir", b"..", b"..", b"..", b"..", b"tmp", MARK.encode() + b".py"], "'..' path component"),
    "dot-dot to /": (DEEP, "'..' path component"),
    "absolute": ([b"/tmp/" + MARK.encode() + b".py"], "absolute path"),
    ".git hook": ([b".git", b"hooks", b"post-checkout"], ".git path component"),
    ".GIT config": ([b"exir", b".GIT", b"config"], ".git path component"),
    "dot": ([b"exir", b".", MARK.encode() + b".py"], "'.' path component"),
    "newline": ([b"exir", b"ok.py\n" + MARK.encode() + b".py"], "control character in path"),
    "not UTF-8": ([b"exir", b"\xff" + MARK.encode() + b".py"], "path is not UTF-8"),
}


@pytest.fixture
def escaped(tmp_path_factory):
    """Every file an attack left: the marked name at the top of /tmp (where the absolute and
    deep `..` paths aim) or anywhere under this session's temporary root (data dirs, laid trees,
    run dirs, the sample repository)."""
    def find() -> list[Path]:
        return [*Path("/tmp").glob(f"*{MARK}*"), *tmp_path_factory.getbasetemp().rglob(f"*{MARK}*")]
    assert not find()
    return find


@pytest.mark.parametrize("name", list(ATTACKS))
def test_a_tree_path_that_cannot_be_a_file_name_is_refused(et_repo, data_dir, escaped, name):
    components, why = ATTACKS[name]
    head = hostile_commit(et_repo.path, et_repo.base, [(components, b"100644", PAYLOAD)])

    report = triage(TriageOptions(repo=et_repo.path, base="main", head=head, data_dir=data_dir,
                                  suites=["multi_method"]))

    assert report.plan.refused.startswith("refused: the change's tree holds a path that cannot be a file name")
    assert why in report.plan.refused, report.plan.refused
    [verdict] = report.results
    assert (verdict.verdict, verdict.suite, verdict.failure.rule) == ("environment", "environment", "refused")
    assert verdict.primary_line == report.plan.refused
    assert report.build.status == "skipped" and not report.plan.suites and not report.suites
    text = to_markdown(report)
    assert "> Nothing of this change was run: refused: the change's tree holds a path that cannot be" in text
    # the change's own tree: refused in its own section, never "not the change's fault"
    assert text.startswith("## etriage: Refused: the change's tree holds a path")
    assert "## Refused: nothing of this change was run" in text and "not the change's fault" not in text
    assert not escaped()


def test_a_hostile_merge_base_is_refused_too(et_repo, data_dir, escaped):
    """The diff is clean, but the tree it sits on holds `..`: met while reading that tree (the
    selection's import graph, the environment's layout), it is still a refusal, not a crash."""
    base = hostile_commit(et_repo.path, et_repo.base, [(DEEP, b"100644", PAYLOAD)])
    tree_path = "exir/backend/backend_api.py"
    text = git(et_repo.path, "show", f"{et_repo.base}:{tree_path}") + b"\n# a harmless edit\n"
    head = hostile_commit(et_repo.path, base, [([p.encode() for p in tree_path.split("/")], b"100644", text)])

    report = triage(TriageOptions(repo=et_repo.path, base=base, head=head, data_dir=data_dir,
                                  suites=["multi_method"]))

    [verdict] = report.results
    assert verdict.failure.rule == "refused" and "'..' path component" in verdict.primary_line
    assert not escaped()


@pytest.mark.parametrize("name", ["dot-dot to /", ".git hook"])
def test_each_writer_refuses_the_path_itself(et_repo, installed, tmp_path, escaped, name):
    """Below the plan, each writer checks on its own: the overlay, the native checkout exported
    whole and moved by diff. Nothing is written outside its root, and the incremental update
    checks every path before it deletes or writes any."""
    components, why = ATTACKS[name]
    head = hostile_commit(et_repo.path, et_repo.base, [(components, b"100644", PAYLOAD)])
    path = b"/".join(components).decode(errors="surrogateescape")

    with pytest.raises(treepaths.UnsafePath, match=why):
        overlay.lay_overlay(installed, tmp_path / "overlay", {"exir/fine.py": b"", path: PAYLOAD})
    assert not (tmp_path / "overlay").exists()

    src, state = tmp_path / "native" / "src" / "executorch", tmp_path / "native" / "src.json"
    state.parent.mkdir(parents=True)
    with pytest.raises(treepaths.UnsafePath, match=why):
        native.sync_checkout(et_repo.path, head, src, state)
    assert native.sync_checkout(et_repo.path, et_repo.base, src, state) == "exported"  # a failed sync starts over
    before = sorted(p for p in src.rglob("*"))
    with pytest.raises(treepaths.UnsafePath, match=why):
        native.sync_checkout(et_repo.path, head, src, state)  # by diff: refused before any write
    assert sorted(p for p in src.rglob("*")) == before
    assert not escaped()


PASSWD = Path("/etc/passwd").read_bytes()


def tables_without_compiled_parts(dest: Path) -> Path:
    """The default tables minus the recipe that builds compiled parts: a gitlink changes the
    native sources' key, and a real worker would build them (an hour cold, docs/ENVIRONMENTS.md);
    without the recipe the installed wheel's serve, as on a worker whose tables have none."""
    shutil.copytree(DEFAULT_DIR, dest)
    recipes = yaml.safe_load((dest / "recipes.yaml").read_text())
    del recipes["recipes"]["pybind"]
    (dest / "recipes.yaml").write_text(yaml.safe_dump(recipes))
    return dest


LINKS = [([b"exir", b"passwd"], b"120000", b"/etc/passwd"),
         ([b"exir", b"backend", b"etc"], b"120000", b"/etc"),
         ([b"exir", b"vendored"], b"160000", b"1" * 40)]  # outside third-party/: no cmake recipe is triggered


def links_head(et_repo) -> str:
    edit = git(et_repo.path, "show", f"{et_repo.base}:exir/backend/backend_api.py") + b"\n# edited\n"
    return hostile_commit(et_repo.path, et_repo.base, [*LINKS, ([b"exir", b"backend", b"backend_api.py"], b"100644", edit)])


def test_committed_symlinks_and_a_gitlink_are_kept_as_links_never_followed(et_repo, tmp_path, escaped):
    """The plan says what each link is; the native checkout (where the tarfile export crashed on
    these) writes the symlinks as links, a marker for the submodule the clone has not got, and
    copies nothing of /etc; a later write through the planted directory link is refused."""
    head = links_head(et_repo)
    plan = plan_change(et_repo.path, "main", head, load_tables(), suites=["multi_method"])
    assert not plan.refused and plan.suites == ["multi_method"]
    notes = "\n".join(plan.notes)
    assert "`exir/passwd` is a symbolic link: its target is data, never followed" in notes
    assert "`exir/backend/etc` is a symbolic link" in notes
    assert "`exir/vendored` is a submodule (gitlink)" in notes

    src, state = tmp_path / "src" / "executorch", tmp_path / "src.json"
    for how in ("exported", "3 file(s) written"):  # whole, then by diff from the base
        assert native.sync_checkout(et_repo.path, head, src, state).startswith(how)
        assert (src / "exir" / "passwd").is_symlink() and (src / "exir" / "passwd").readlink() == Path("/etc/passwd")
        assert (src / "exir" / "backend" / "etc").readlink() == Path("/etc")
        assert "1111111111" in (src / "exir" / "vendored" / ".etriage-missing-submodule").read_text()
        assert native.sync_checkout(et_repo.path, et_repo.base, src, state) == \
            "1 file(s) written, 3 removed, 0 submodule(s) moved"
        assert not (src / "exir" / "passwd").is_symlink() and not (src / "exir" / "vendored").exists()
    assert not [p for p in src.rglob("*") if p.is_file() and not p.is_symlink() and p.read_bytes() == PASSWD]
    native.sync_checkout(et_repo.path, head, src, state)
    with pytest.raises(treepaths.UnsafePath, match="through a symlink"):
        treepaths.replace_target(src, f"exir/backend/etc/{MARK}")
    assert not list(Path("/etc").glob(f"*{MARK}*")) and not escaped()


@pytest.mark.slow  # 44 s on a loaded 2-core machine: the suite runs for real in the sandbox
def test_a_triage_over_links_completes_and_follows_none(et_repo, data_dir, tmp_path):
    report = triage(TriageOptions(repo=et_repo.path, base="main", head=links_head(et_repo), data_dir=data_dir,
                                  suites=["multi_method"], tables_dir=tables_without_compiled_parts(tmp_path / "t")))

    assert not report.plan.refused and report.build.status == "ok", report.build.reason
    assert "`exir/passwd` is a symbolic link" in to_markdown(report)
    [suite] = [s for s in report.suites if s.suite == "multi_method"]
    assert suite.status == "ran" and suite.tests, (suite.status, suite.reason)
    laid = Path(report.build.environment.package_dir)
    assert not (laid / "exir" / "passwd").exists() and not (laid / "exir" / "backend" / "etc").exists()
    assert not [p for p in data_dir.rglob("*") if p.is_file() and not p.is_symlink()
                and p.stat().st_size == len(PASSWD) and p.read_bytes() == PASSWD]
