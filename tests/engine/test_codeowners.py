"""CODEOWNERS read the way GitHub reads it: gitignore-style patterns, the last matching line
wins, unreadable lines skipped with their line number. The table's cases are the examples of
GitHub's "About code owners" page; the last tests use pytorch/executorch's real file."""
from __future__ import annotations

from pathlib import Path

import pytest

from triage_rules.codeowners import LOCATIONS, MAX_BYTES, parse

FIXTURES = Path(__file__).parent / "fixtures" / "codeowners"


@pytest.mark.parametrize("pattern, path, matches", [
    ("*", "README.md", True),
    ("*", "deeply/nested/file.py", True),
    ("*.js", "app.js", True),
    ("*.js", "src/ui/app.js", True),
    ("*.js", "src/ui/app.jsx", False),
    ("*.js", "src/app.js/index.html", True),  # a directory called app.js owns its contents
    ("/build/logs/", "build/logs/today.log", True),
    ("/build/logs/", "build/logs/2024/old.log", True),
    ("/build/logs/", "build/logs", False),  # a directory pattern names no file of that name
    ("/build/logs/", "src/build/logs/today.log", False),  # anchored at the root
    ("docs/*", "docs/getting-started.md", True),
    ("docs/*", "docs/build-app/troubleshooting.md", False),  # only the directory's own files
    ("docs/*", "src/docs/readme.md", False),  # a slash inside anchors it at the root
    ("/*", "README.md", True),
    ("/*", "src/main.py", False),
    ("apps/", "apps/web/app.js", True),
    ("apps/", "services/apps/web/app.js", True),  # no leading or inner slash: any depth
    ("apps/", "apps", False),
    ("/docs/", "docs/index.md", True),
    ("/docs/", "src/docs/index.md", False),
    ("**/logs", "build/logs/today.log", True),
    ("**/logs", "deeply/nested/logs/x", True),
    ("**/logs", "logs/x", True),
    ("**/logs", "catalogs/x", False),
    ("/apps/github", "apps/github/index.js", True),  # no trailing slash: the file or the directory
    ("/apps/github", "apps/github", True),
    ("/apps/github", "apps/githubber/x.js", False),
    ("docs/**", "docs/a/b/c.md", True),
    ("docs/**", "docs", False),
    ("a/**/b", "a/b", True),
    ("a/**/b", "a/x/y/b/file", True),
    ("a/**/b", "a/x/yb/file", False),
    ("exir/*.py", "exir/tensor.py", True),
    ("exir/*.py", "exir/passes/tensor.py", False),
    ("te?t.py", "src/test.py", True),
    ("te?t.py", "src/te/t.py", False),
    ("/", "anything/at/all", True),
    ("/CMakeLists.txt", "CMakeLists.txt", True),
    ("CMakeLists.txt", "backends/qualcomm/CMakeLists.txt", True),
    ("/backends/qualcomm", "./backends/qualcomm/builders/op_add.py", True),  # ./ and \\ normalised
    ("/backends/qualcomm", "backends\\qualcomm\\x.py", True),
    ("*.PY", "a.py", False),  # case matters
])
def test_a_pattern_matches_as_github_says(pattern, path, matches):
    owners = parse(f"{pattern} @owner\n")
    assert (owners.rule_for(path) is not None) is matches


def test_the_last_matching_line_wins_and_owners_are_not_merged():
    owners = parse("*.js @js-owner #This is an inline comment.\n*.css @css-owner\n"
                   "/apps/ @octocat\n/apps/github @doctocat\n")
    assert owners.owners_of("apps/github/main.js") == ("@doctocat",)
    assert owners.owners_of("apps/web/main.js") == ("@octocat",)
    assert owners.owners_of("lib/main.js") == ("@js-owner",)
    assert owners.rule_for("lib/main.js").line == 1
    assert owners.rule_for("README.md") is None


def test_a_line_without_owners_makes_its_paths_unowned():
    owners = parse("/apps/ @octocat\n/apps/github\n")
    rule = owners.rule_for("apps/github/x.js")
    assert rule.line == 2 and rule.owners == ()
    assert owners.owners_of("apps/other/x.js") == ("@octocat",)


def test_teams_emails_escaped_spaces_and_comments():
    owners = parse("# a comment\n\n   # an indented comment\n"
                   "/.github/workflows/ @octo-org/octocats\n*.go docs@example.com\n"
                   "/My\\ Documents/ @writer   # trailing comment\n")
    assert owners.owners_of(".github/workflows/ci.yml") == ("@octo-org/octocats",)
    assert owners.owners_of("cmd/main.go") == ("docs@example.com",)
    assert owners.owners_of("My Documents/notes.txt") == ("@writer",)
    assert [r.line for r in owners.rules] == [4, 5, 6] and not owners.problems


@pytest.mark.parametrize("line, why", [
    ("!/docs/secret.md @x", "negation"),
    ("/docs/[ab].md @x", "character ranges"),
    ("\\#notes.md @x", "escaped '#'"),
    ("/docs/ octocat", "is not an owner"),
    ("/docs/ @-bad", "is not an owner"),
    ("/docs/ @" + "a" * 40, "is not an owner"),
    ("/docs/ @x" + " " * 5000, "longer than"),
])
def test_a_line_github_cannot_read_is_skipped_with_its_line_number(line, why):
    owners = parse(f"* @everyone\n{line}\n/src/ @dev\n")
    [problem] = owners.problems
    assert problem.line == 2 and why in problem.message
    assert [r.line for r in owners.rules] == [1, 3]  # the others still apply
    assert owners.owners_of("docs/secret.md") == ("@everyone",)


def test_a_file_of_three_megabytes_is_not_read():
    owners = parse("* @x\n" * (MAX_BYTES // 5 + 1))
    assert owners.rules == () and "3 MB" in owners.problems[0].message


def test_github_looks_in_three_places_in_this_order():
    assert LOCATIONS == (".github/CODEOWNERS", "CODEOWNERS", "docs/CODEOWNERS")


def test_executorchs_real_file():
    owners = parse((FIXTURES / "executorch.CODEOWNERS").read_text(), "CODEOWNERS")
    assert not owners.problems and len(owners.rules) == 67
    qnn = owners.rule_for("backends/qualcomm/builders/op_add.py")
    assert qnn.pattern == "/backends/qualcomm" and qnn.owners[0] == "@cccclai" and len(qnn.owners) == 5
    # `/exir/backend` is written before `/exir`: the later, broader line decides (GitHub's rule,
    # where the bundled table's "deepest prefix" would say otherwise)
    backend = owners.rule_for("exir/backend/backend_api.py")
    assert backend.pattern == "/exir" and backend.owners == ("@JacobSzwejbka", "@larryliu0820")
    # ... while `/runtime/backend` comes after `/runtime` and wins for its files
    assert owners.owners_of("runtime/backend/interface.cpp") == ("@cccclai",)
    assert owners.rule_for("backends/cadence/hifi/op.cpp").owners == ()  # listed, nobody named
    assert owners.owners_of("backends/qualcomm/CMakeLists.txt") == ("@larryliu0820", "@kirklandsign")
    assert owners.rule_for("setup.py") is None
    assert owners.owners_of("exir_extra/x.py") == ()  # /exir names the directory, not a prefix
