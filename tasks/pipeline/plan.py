"""Stage 1, plan: from the diff merge_base..head to areas, backends, suites, targets, recipes.

Takes a repository path and two revisions; returns a `Plan`. The mapping is data
(triage_rules/tables/areas.yaml, suites.yaml, recipes.yaml, targets.yaml).
"""
from __future__ import annotations

from fnmatch import fnmatchcase

from tasks.pipeline import gitio, treepaths
from tasks.pipeline.tables import Tables
from tasks.records import ChangedFile, Plan


def area_of(path: str, tables: Tables):
    for area in tables.areas:
        if area.matches(path):
            return area
    return None


def backends_of(path: str, area, tables: Tables) -> set[str]:
    if area is None:
        return set()
    if area.backends == "all":
        return set(tables.backends)
    if area.backends == "from_path":
        parts = path.split("/")
        name = parts[1] if len(parts) > 2 else ""
        return {name} if name in tables.backends else set()
    return set(area.backends)


def suites_for(backends: set[str], tables: Tables, only: list[str] | None,
               paths: list[str] = (), notes: list[str] | None = None) -> list[str]:
    """Suites for the backends; a suite with `when_paths` only when the change touches one
    of them, unless asked for by name."""
    chosen = [s for s in tables.suites.values() if backends & set(s.backends)]
    if only:
        return [s.name for s in chosen if s.name in only]
    skipped = [s.name for s in chosen if not s.wanted_for(paths)]
    if skipped and notes is not None:
        notes.append(f"not run by default for this change (it touches none of their paths): {', '.join(skipped)}")
    return [s.name for s in chosen if s.name not in skipped]


def recipes_for(files: list[ChangedFile], backends: set[str], tables: Tables) -> list[str]:
    chosen = []
    for recipe in tables.recipes.values():
        if recipe.kind == "environment":  # a commit's compiled parts: tasks/environments decides
            continue
        # the overlay takes what it covers; a cmake recipe what its `paths` say rebuilds it
        hit = recipe.triggered_by if recipe.kind == "cmake" else recipe.covers
        touched = [f for f in files if hit(f.path) or (f.old_path and hit(f.old_path))]
        if not touched:
            continue
        if recipe.kind == "cmake" and recipe.backends and not backends & set(recipe.backends):
            continue
        chosen.append(recipe.name)
    return chosen


def submodules_needed(files: list[ChangedFile], tables: Tables):
    """Which submodule paths a native build of this change reads: those the `inputs` of a cmake
    recipe the change triggers cover (the superset of what the plan builds). None when the
    change triggers no cmake recipe: a Python-only change needs no submodule."""
    touched = [p for f in files for p in filter(None, (f.path, f.old_path))]
    recipes = [r for r in tables.recipes.values()
               if r.kind == "cmake" and any(r.triggered_by(p) for p in touched)]
    if not recipes:
        return None
    return lambda path: any(r.covers(path) for r in recipes)


LINK_MODES = {"120000": "a symbolic link", "160000": "a submodule (gitlink)"}


def link_note(f: ChangedFile) -> str:
    """What becomes of a link in the change: it is kept as what it is, never followed."""
    shown = f.path.encode("unicode_escape").decode()[:200]
    if f.mode == "120000":
        return (f"`{shown}` is a symbolic link: its target is data, never followed by the worker; the "
                "environment's Python tree leaves it out, a native checkout keeps it as a link")
    return (f"`{shown}` is a submodule (gitlink): its files are not in this repository's tree; a native build "
            "reads the worker's fetched copy of it")


def refusal(unsafe: treepaths.UnsafePath) -> str:
    return f"refused: the change's tree holds a path that cannot be a file name ({unsafe})"


def plan_change(repo, base: str, head: str, tables: Tables, *,
                targets: list[str] | None = None, suites: list[str] | None = None,
                path_backends: dict[str, str] | None = None, targets_named: bool = True) -> Plan:
    """`path_backends`: the repository's own glob -> backend map (`triage.paths`), asked before
    the tables' areas for which backends a path affects. `targets_named`: the targets were asked
    for by name (the command line, a slash command), so a native target with nothing to rebuild
    stays in the plan and says why it did not run; an automatic run leaves it out with a note."""
    base_sha, head_sha = gitio.resolve(repo, base), gitio.resolve(repo, head)
    merge_base = gitio.merge_base(repo, base_sha, head_sha)
    try:
        files = gitio.changed_files(repo, merge_base, head_sha)
    except treepaths.UnsafePath as unsafe:  # a hostile tree: nothing of it is planned, built or run
        return Plan(base=base_sha, head=head_sha, merge_base=merge_base, changed_files=[], areas=[],
                    backends=[], suites=[], targets=[], recipes=[], refused=refusal(unsafe),
                    notes=[f"Nothing of this change was run: {refusal(unsafe)}."])
    notes: list[str] = [link_note(f) for f in files if f.mode in LINK_MODES]

    unknown_suites = [s for s in suites or () if s not in tables.suites]
    if unknown_suites:
        raise ValueError(f"unknown suite(s): {', '.join(unknown_suites)} (known: {', '.join(tables.suites)})")
    if targets:
        unknown = [t for t in targets if t not in tables.targets]
        if unknown:
            raise ValueError(f"unknown target(s): {', '.join(unknown)} (known: {', '.join(tables.targets)})")
    target_names = list(targets or tables.targets)

    areas, backends, docs_only_files = [], set(), 0
    for f in files:
        for path in filter(None, (f.path, f.old_path)):
            area = area_of(path, tables)
            if area is not None and area.name not in areas:
                areas.append(area.name)
            if area is not None and area.docs:
                docs_only_files += path == f.path
            own = next((b for glob, b in (path_backends or {}).items() if fnmatchcase(path, glob)), None)
            backends |= {own} if own else backends_of(path, area, tables)

    docs_only = bool(files) and docs_only_files == len(files)
    if not files:
        notes.append("no changes between the merge base and head: nothing to run")
    elif docs_only:
        notes.append("documentation-only change: no build, no suites run")
    elif not backends and not any(p.endswith(".py") for f in files for p in filter(None, (f.path, f.old_path))):
        notes.append(f"changes only in areas that affect no backend ({', '.join(areas)}): no suites run")

    touched = [p for f in files for p in filter(None, (f.path, f.old_path))]
    suite_names = suites_for(backends, tables, suites, touched, notes) if backends and not docs_only else []
    python = [p for p in touched if p.endswith(".py") and not (area_of(p, tables) and area_of(p, tables).docs)]
    if python and "selected" in tables.suites and "selected" not in suite_names and suites in (None, [], ["selected"]):
        # Every backend is decided per test: a change outside the backends with suites of their
        # own still runs the tests selected for it that run here.
        suite_names.append("selected")
        outside = sorted({p.split("/")[1] for p in python if p.startswith("backends/") and p.count("/") >= 2}
                         - set(tables.backends))
        notes.append((f"backend(s) {', '.join(outside)}: no suites of their own in the tables; " if outside else "")
                     + "the tests selected for this change run where they can (those needing an absent "
                       "SDK, package or device are listed as not run)")
    recipe_names = recipes_for(files, backends, tables) if suite_names else []
    recipe_names = [r for r in recipe_names if not tables.recipes[r].for_suites
                    or set(tables.recipes[r].for_suites) & set(suite_names)]  # e.g. cxx_tests' binaries
    native = [r for r in recipe_names if tables.recipes[r].kind == "cmake"]
    idle = [t for t in target_names if tables.targets[t].native and not native]
    if idle and not (targets and targets_named):
        target_names = [t for t in target_names if t not in idle]
        if suite_names:
            notes.append(f"no native change: {', '.join(idle)} not needed (nothing to rebuild)")
    return Plan(base=base_sha, head=head_sha, merge_base=merge_base, changed_files=files,
                areas=areas, backends=sorted(backends), suites=suite_names,
                targets=target_names, recipes=recipe_names, docs_only=docs_only, notes=notes)
