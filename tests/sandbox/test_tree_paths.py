"""Paths from a change are data: `treepaths.check` refuses each kind of name git can store but a
file name must not be (table), and a static scan fails when a module that reads git writes to a
destination joined from a variable that did not go through treepaths.

The scan's rule: in every module of tasks/ that reads git (imports gitio or treepaths, or runs
`git`), each writer (write_bytes/write_text, open for writing, shutil.copy*/copytree/move/rmtree,
os.link/symlink/rename/replace/unlink/remove, symlink_to/hardlink_to/mkdir/touch/chmod/unlink,
tarfile's extract/extractall) names its destination either
- through `treepaths.inside/replace_target/regular_file_inside` (the call itself, or a local name
  bound to one, or such a name joined with constants), or
- as a root joined only with constants (`tmp / "build.json"`), or a name that is no join at all; or
- is listed in NOT_FROM_GIT below with why its variable part is no path from a tree.
A join with a variable (`root / path`, `root.joinpath(x)`, `os.path.join(root, x)`, an f-string
component) anywhere else fails the test, as `test_an_unchecked_writer_is_caught` shows on a
synthetic module. tarfile extraction is refused outright: an archive's member names are paths
from a change.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tasks.pipeline import treepaths

REPO_ROOT = Path(__file__).resolve().parents[2]

CASES = [  # path, what check() says (None: accepted)
    ("exir/backend/backend_api.py", None),
    ("a", None),
    ("exir/.gitignore", None),  # a file named .gitignore is fine; a `.git` component is not
    ("exir/../../../../tmp/x.py", "'..' path component"),
    ("..", "'..' path component"),
    ("exir/./x.py", "'.' path component"),
    ("exir//x.py", "empty path component"),
    ("exir/", "empty path component"),
    ("", "empty path"),
    ("/tmp/x.py", "absolute path"),
    ("/", "absolute path"),
    (".git/hooks/post-checkout", ".git path component"),
    ("exir/.GIT/config", ".git path component"),
    ("exir/a\nb.py", "control character in path"),
    ("exir/a\rb.py", "control character in path"),
    ("exir/a\0b.py", "control character in path"),  # git cannot store it; refused anyway
    ("exir/\udcff.py", "path is not UTF-8"),  # gitio decodes names with surrogateescape
    ("a/" + "b" * 256, "path component longer than 255 bytes"),
    ("a/" * 2049 + "b", "path longer than 4096 bytes"),
]


@pytest.mark.parametrize("path,why", CASES)
def test_check_refuses_what_cannot_be_a_file_name(path, why):
    if why is None:
        assert treepaths.check(path) == path
    else:
        with pytest.raises(treepaths.UnsafePath, match=why):
            treepaths.check(path)


def test_inside_resolves_links_already_in_the_tree(tmp_path):
    root = tmp_path / "root"
    (root / "exir").mkdir(parents=True)
    (root / "out").symlink_to(tmp_path)
    assert treepaths.inside(root, "exir/x.py") == root.resolve() / "exir" / "x.py"
    with pytest.raises(treepaths.UnsafePath, match="through a symlink"):
        treepaths.replace_target(root, "out/x.py")
    (root / "exir" / "x.py").symlink_to("/etc/passwd")
    dest = treepaths.replace_target(root, "exir/x.py")  # the link itself is replaced, not followed
    assert not dest.exists() and Path("/etc/passwd").stat().st_size > 0
    (root / "exir" / "k").symlink_to("/etc/passwd")
    with pytest.raises(treepaths.UnsafePath, match="a symbolic link"):
        treepaths.regular_file_inside(root, "exir/k")


# ---- the static scan -------------------------------------------------------------------------------

TREEPATHS = {"inside", "replace_target", "regular_file_inside"}
METHOD_WRITERS = {"write_bytes", "write_text", "symlink_to", "hardlink_to", "mkdir", "touch", "chmod", "unlink"}
FUNCTION_WRITERS = {  # (module, function) -> index of the destination argument
    ("shutil", "copy"): 1, ("shutil", "copy2"): 1, ("shutil", "copyfile"): 1, ("shutil", "copytree"): 1,
    ("shutil", "move"): 1, ("shutil", "rmtree"): 0, ("os", "link"): 1, ("os", "symlink"): 1,
    ("os", "rename"): 1, ("os", "replace"): 1, ("os", "unlink"): 0, ("os", "remove"): 0,
    ("os", "makedirs"): 0, ("os", "mkdir"): 0, ("os", "chmod"): 0,
}
# (module, function, a joined path as written there) -> why its variable part is no path from a tree
NOT_FROM_GIT = {
    ("tasks/environments/compiled.py", "built_parts", "root.with_name(f'{key}.tmp{os.getpid()}')"):
        "the native key (a hash) and the worker's pid",
    ("tasks/environments/layout.py", "package_index",
     "cache_dir / f'{hashlib.sha256(str(package_dir).encode()).hexdigest()[:16]}.json'"): "a hash of a directory name",
    ("tasks/environments/layout.py", "package_index", "cache_path.with_suffix(f'.{os.getpid()}.tmp')"): "the pid",
    ("tasks/environments/layout.py", "lay", "store / 'trees' / f'{key}.tmp{os.getpid()}'"):
        "the tree's key (a hash) and the worker's pid",
    ("tasks/environments/layout.py", "lay", "store / 'trees' / key"): "the tree's key (a hash)",
    ("tasks/environments/layout.py", "_store_blobs", "path.with_name(f'{sha}.tmp{os.getpid()}')"):
        "a blob id (checked against its content by blob_id) and the pid",
    ("tasks/pipeline/native.py", "build", "spec.run_dir / 'native' / f'ccache-{recipe.name}-{commit[:12]}.log'"):
        "the recipe's name (the tables') and the commit's sha",
    ("tasks/pipeline/native.py", "build", "repo_dir / 'build' / f'{recipe.name}-{toolchain.name}'"):
        "the recipe's and the toolchain's names (the tables')",
    ("tasks/pipeline/native.py", "build", "folder.with_name(folder.name + '.json')"):
        "the build folder's name (the recipe's and the toolchain's, the tables')",
    ("tasks/pipeline/native.py", "_store", "artifacts.with_name(artifacts.name + f'.tmp{os.getpid()}')"):
        "the build cache's key and the pid",
    ("tasks/pipeline/native.py", "cmake_args", "native_dir / 'toolchains' / f'{self.name}-{digest}.cmake'"):
        "the toolchain's name and its text's hash",
    ("tasks/pipeline/overlay.py", "farm", "dst / entry.name"):
        "entries of the installed (or built) package being farmed, not of a change's tree",
    ("tasks/pipeline/select.py", "import_graph", "cache.with_suffix(f'.{os.getpid()}.tmp')"): "the pid",
    ("tasks/pipeline/select.py", "import_graph",
     "data_dir / 'import-graph' / f'{gitio.tree_sha(repo, commit)}.v{GRAPH_VERSION}.json'"): "a tree's sha",
    ("tasks/repos.py", "_add_worktree", "worktrees / f'.{stem}.lock.new'"): "the worktree's generated name",
    ("tasks/repos.py", "_add_worktree", "worktrees / f'{stem}.lock'"): "as above",
    ("tasks/repos.py", "_remove_worktree", "self.root / 'worktrees' / f'{checkout.path.name}.lock'"): "as above",
    ("tasks/repos.py", "_submodule_mirror", "self.root / 'submodules' / f'{hashlib.sha256(url.encode()).hexdigest()[:16]}.git'"):
        "a hash of the submodule's URL",
    ("tasks/sample_repo.py", "build_sample_repo", "repo / src.relative_to(installed)"):
        "files of the installed package, written into the throwaway sample repository",
}


def reads_git(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "tasks.pipeline" \
                and {a.name for a in node.names} & {"gitio", "treepaths"}:
            return True
        if isinstance(node, ast.ImportFrom) and node.module in ("tasks.pipeline.gitio", "tasks.pipeline.treepaths"):
            return True
        if isinstance(node, ast.Constant) and node.value == "git":
            return True
    return False


def _is_treepaths_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in TREEPATHS \
        and isinstance(node.func.value, ast.Name) and node.func.value.id == "treepaths"


def _constant(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) or isinstance(node, ast.Name) and node.id.isupper()


def _joins_variable(node: ast.AST) -> bool:
    """Is `node` a path joined with something that is not a constant?"""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return not _constant(node.right) or _joins_variable(node.left)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr in ("joinpath", "join", "with_name", "with_suffix", "__truediv__"):
        return any(not isinstance(a, ast.Constant) for a in node.args) or _joins_variable(node.func.value)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("Path", "open"):
        return any(not isinstance(a, ast.Constant) and _joins_variable(a) or isinstance(a, ast.JoinedStr)
                   for a in node.args)
    return isinstance(node, ast.JoinedStr)


class Function(ast.NodeVisitor):
    """One function's writers, with what each destination name was bound to in it."""

    def __init__(self, node, allowed: set[str] = frozenset()):
        self.allowed = allowed  # joins NOT_FROM_GIT lists for this function
        self.bound: dict[str, list[ast.AST]] = {}
        for sub in ast.walk(node):
            if isinstance(sub, (ast.Assign, ast.AnnAssign)) and sub.value is not None:
                for target in (sub.targets if isinstance(sub, ast.Assign) else [sub.target]):
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name):
                            self.bound.setdefault(name.id, []).append(sub.value)
            elif isinstance(sub, ast.NamedExpr):
                self.bound.setdefault(sub.target.id, []).append(sub.value)
            elif isinstance(sub, (ast.For, ast.comprehension)):
                for name in ast.walk(sub.target):
                    if isinstance(name, ast.Name):
                        self.bound.setdefault(name.id, []).append(sub.iter)
            elif isinstance(sub, ast.withitem) and sub.optional_vars is not None:
                for name in ast.walk(sub.optional_vars):
                    if isinstance(name, ast.Name):
                        self.bound.setdefault(name.id, []).append(sub.context_expr)

    def checked(self, dest: ast.AST, depth: int = 0) -> bool:
        """Does `dest` come through treepaths (or name a root joined with constants only)?"""
        if _is_treepaths_call(dest) or ast.unparse(dest) in self.allowed:
            return True
        if isinstance(dest, ast.Attribute) and dest.attr == "parent":
            return self.checked(dest.value, depth)
        if isinstance(dest, ast.BinOp) and isinstance(dest.op, ast.Div) and _constant(dest.right):
            return self.checked(dest.left, depth)
        if isinstance(dest, ast.Name) and depth < 4:
            values = self.bound.get(dest.id)
            if not values:  # a parameter: the caller's business (no join here)
                return True
            return all(self._value_ok(v, depth + 1) for v in values)
        return not _joins_variable(dest)

    def _value_ok(self, value: ast.AST, depth: int) -> bool:
        if isinstance(value, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            return self.checked(value.elt, depth)
        if isinstance(value, (ast.List, ast.Tuple)):
            return all(self.checked(e, depth) for e in value.elts if not isinstance(e, ast.Starred))
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in ("sorted", "list"):
            return all(self._value_ok(a, depth) for a in value.args)
        return self.checked(value, depth)


def writers(tree: ast.Module, module: str = ""):
    """(function name, destination node, Function, line) of every writer call, and tarfile
    extraction as (name, None, None, line)."""
    for func in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        scope = Function(func, {text for m, f, text in NOT_FROM_GIT if (m, f) == (module, func.name)})
        for node in ast.walk(func):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open":
                    mode = node.args[1] if len(node.args) > 1 else next(
                        (k.value for k in node.keywords if k.arg == "mode"), None)
                    if isinstance(mode, ast.Constant) and set(str(mode.value)) & set("wax+"):
                        yield func.name, node.args[0], scope, node.lineno
                continue
            attr, owner = node.func.attr, node.func.value
            if attr in ("extractall", "extract"):
                yield func.name, None, None, node.lineno
            elif isinstance(owner, ast.Name) and (owner.id, attr) in FUNCTION_WRITERS:
                index = FUNCTION_WRITERS[(owner.id, attr)]
                if len(node.args) > index:
                    yield func.name, node.args[index], scope, node.lineno
            elif attr in METHOD_WRITERS and not (isinstance(owner, ast.Name) and owner.id in ("os", "shutil")):
                yield func.name, owner, scope, node.lineno


def unchecked(name: str, tree: ast.Module) -> list[str]:
    found = []
    for func, dest, scope, line in writers(tree, name):
        if dest is None:
            found.append(f"{name}:{line} ({func}): tarfile extraction (an archive's names are a change's paths)")
        elif not scope.checked(dest):
            found.append(f"{name}:{line} ({func}): {ast.unparse(dest)}")
    return found


def git_modules():
    for path in sorted((REPO_ROOT / "tasks").rglob("*.py")):
        name = path.relative_to(REPO_ROOT).as_posix()
        tree = ast.parse(path.read_text(), name)
        if reads_git(tree) and "/regressions/" not in name:
            yield name, tree


def test_every_writer_of_a_git_reading_module_goes_through_treepaths():
    modules = dict(git_modules())
    for expected in ("tasks/pipeline/native.py", "tasks/pipeline/overlay.py", "tasks/environments/layout.py",
                     "tasks/environments/compiled.py", "tasks/repos.py"):
        assert expected in modules, f"the scan must see {expected}"
    problems = [p for name, tree in modules.items() for p in unchecked(name, tree)]
    assert not problems, ("a writer whose destination joins a variable not checked by tasks.pipeline.treepaths "
                          "(join through treepaths.inside/replace_target, or list it in NOT_FROM_GIT with why "
                          "its variable part is no path from a tree):\n" + "\n".join(problems))


def test_the_register_names_only_joins_that_exist():
    """A stale entry would let a new writer of the same text pass unseen."""
    seen = {(name, func.name, ast.unparse(node)) for name, tree in git_modules() for func in ast.walk(tree)
            if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) for node in ast.walk(func)
            if isinstance(node, ast.expr)}
    assert set(NOT_FROM_GIT) <= seen, set(NOT_FROM_GIT) - seen


SYNTHETIC = """
import os, shutil, tarfile
from tasks.pipeline import gitio, treepaths

def lay(root, repo, commit):
    for path in gitio.ls_tree(repo, commit):
        dest = root / path
        dest.write_bytes(gitio.show(repo, commit, path))    # caught
        (root / path).parent.mkdir(parents=True)            # caught
        shutil.copy2(dest, root / "copies" / path)          # caught
        os.symlink("x", os.path.join(root, path))           # caught
        with open(f"{root}/{path}", "w") as out:            # caught
            out.write("x")
        good = treepaths.replace_target(root, path)
        good.write_bytes(b"")                               # through treepaths: passes
        good.parent.chmod(0o755)                            # passes
        treepaths.inside(root, path).mkdir()                # passes
        (good.parent / "marker").write_text("")             # passes
        (root / "state.json").write_text("{}")              # constants only: passes

def unpack(data, dest):
    with tarfile.open(fileobj=data) as tar:
        tar.extractall(dest, filter="data")                 # caught: names from an archive
"""


def test_an_unchecked_writer_is_caught():
    """The scan really fails: each unchecked writer of a synthetic module is reported, by line,
    and none of the checked ones."""
    tree = ast.parse(SYNTHETIC)
    assert reads_git(tree)
    found = unchecked("synthetic.py", tree)
    caught = sorted(int(p.split(":")[1].split()[0]) for p in found)
    expected = [n for n, line in enumerate(SYNTHETIC.splitlines(), 1) if "# caught" in line]
    assert len(expected) == 6 and caught == expected, found
