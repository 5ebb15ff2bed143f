"""triage_rules/yamlmodel.py: YAML with the line of every key and value, pydantic errors as
"line: where: what" problems. The readers' own tests (rules, tables, repo config) cover the
wording each file gets; these cover the helper's parts."""
from __future__ import annotations

from typing import Annotated, Literal

import pytest
from pydantic import Field

from triage_rules import yamlmodel as ym


class Job(ym.StrictModel):
    name: ym.Str
    kind: Literal["build", "test"] = "test"
    retries: Annotated[ym.Int, Field(ge=0, le=5, description="between 0 and 5")] = 0
    pattern: ym.Regex | None = None
    timeout: ym.Number = 60


class Plan(ym.StrictModel):
    jobs: list[Job] = []
    owners: dict[Literal["ci", "runtime"], tuple[ym.Str, ...]] = {}


TEXT = """\
jobs:
  - name: unit
    kind: test
  - {name: lint, retries: 2}
owners:
  ci: ['@a', '@b']
"""


def test_read_keeps_the_line_of_every_key_value_and_item():
    located = ym.read(TEXT)
    assert located.data == {"jobs": [{"name": "unit", "kind": "test"}, {"name": "lint", "retries": 2}],
                            "owners": {"ci": ["@a", "@b"]}}
    assert located.key_lines[("jobs",)] == 1 and located.value_lines[("jobs", 0)] == 2
    assert located.key_lines[("jobs", 0, "kind")] == 3
    assert located.value_lines[("jobs", 1)] == 4 and located.key_lines[("jobs", 1, "retries")] == 4
    assert located.value_lines[("owners", "ci", 1)] == 6
    assert located.line(("jobs", 1, "nope", 3)) == 4  # the nearest place that exists


@pytest.mark.parametrize("text, expected", [
    ("when: 2026-01-01\n", ym.Unsupported("tag:yaml.org,2002:timestamp")),
    ("when: !!python/object/apply:os.getpid []\n", ym.Unsupported("tag:yaml.org,2002:python/object/apply:os.getpid")),
    ("when: !!set {a, b}\n", ym.Unsupported("tag:yaml.org,2002:set")),
    ("when: 1.5\n", 1.5),
    ("when: ~\n", None),
    ("when: yes\n", True),  # YAML 1.1, as PyYAML's safe loader reads it
])
def test_only_plain_yaml_types_are_built(text, expected):
    assert ym.read(text).data == {"when": expected}


def test_duplicate_and_non_string_keys_are_problems_at_their_line():
    located = ym.read("a: 1\nb: 2\na: 3\n4: x\n")
    assert located.data == {"a": 1, "b": 2}
    assert [(p.line, p.where, p.message) for p in located.problems] == [
        (3, "a", "duplicate key 'a'"), (4, "", "key '4' must be a string")]


def test_an_alias_bomb_is_refused_not_expanded():
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 7)]
    with pytest.raises(ym.YamlSyntaxError, match="more than 200000 values"):
        ym.read("\n".join(lines) + "\n")


def test_syntax_errors_carry_the_line_and_the_parsers_words():
    with pytest.raises(ym.YamlSyntaxError) as error:
        ym.read("a: 1\nb: [1, 2\n")
    assert error.value.line == 3 and "expected ',' or ']'" in error.value.message


# (text, expected problems as (line, where, message))
MISTAKES = [
    ("jobs:\n  - name: unit\n    kidn: build\n",
     [(3, "jobs[0]", "unknown key 'kidn' (did you mean 'kind'?) (known: name, kind, retries, pattern, timeout)")]),
    ("jobs:\n  - kind: build\n", [(2, "jobs[0]", "missing required key 'name'")]),
    ("jobs:\n  - nmae: unit\n", [(2, "jobs[0]", "unknown key 'nmae' (did you mean 'name'?) (known: name, kind, "
                                                "retries, pattern, timeout)")]),  # not also "missing 'name'"
    ("jobs:\n  - name: 5\n", [(2, "jobs[0].name", "must be a string")]),
    ("jobs:\n  - name: unit\n    kind: biuld\n", [(3, "jobs[0].kind", "'biuld' is not one of build, test (did you mean 'build'?)")]),
    ("jobs:\n  - name: unit\n    retries: 9\n", [(3, "jobs[0].retries", "must be between 0 and 5")]),
    ("jobs:\n  - name: unit\n    retries: '2'\n", [(3, "jobs[0].retries", "must be an integer")]),
    ("jobs:\n  - name: unit\n    timeout: true\n", [(3, "jobs[0].timeout", "must be a number")]),
    ("jobs:\n  - name: unit\n    pattern: 'a(b'\n",
     [(3, "jobs[0].pattern", "bad regex: missing ), unterminated subpattern at position 1")]),
    ("owners:\n  cii: ['@a']\n", [(2, "owners.cii", "'cii' is not one of ci, runtime (did you mean 'ci'?)")]),
    ("owners:\n  ci: '@a'\n", [(2, "owners.ci", "must be a list")]),
    ("jobs: {name: unit}\n", [(1, "jobs", "must be a list")]),
    ("- jobs\n", [(1, "", "must be a mapping (key: value)")]),
    ("jobs:\n  - name: a\n  - name: b\n    kind: x\n  - 7\n",
     [(4, "jobs[1].kind", "'x' is not one of build, test"), (5, "jobs[2]", "must be a mapping (key: value)")]),
]


@pytest.mark.parametrize("text, expected", MISTAKES, ids=[m[1][0][2][:40] for m in MISTAKES])
def test_pydantic_errors_become_problems_with_line_where_and_message(text, expected):
    value, problems = ym.validate(Plan, ym.read(text))
    assert value is None
    assert [(p.line, p.where, p.message) for p in problems] == expected


def test_a_valid_document_gives_the_model():
    plan, problems = ym.validate(Plan, ym.read(TEXT))
    assert problems == []
    assert [job.name for job in plan.jobs] == ["unit", "lint"] and plan.jobs[1].retries == 2
    assert plan.jobs[0].timeout == 60 and isinstance(plan.jobs[0].timeout, int)
