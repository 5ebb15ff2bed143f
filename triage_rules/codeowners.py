"""A repository's CODEOWNERS, read the way GitHub reads it (pure: text in, owners out).

GitHub's rules (docs.github.com, "About code owners"):

- The file is the first of `.github/CODEOWNERS`, `CODEOWNERS`, `docs/CODEOWNERS` that exists
  on the branch (`LOCATIONS`, in that order); a file of 3 MB or more is not read at all.
- Each line is a pattern and its owners (`@user`, `@org/team` or an e-mail address). `#` starts
  a comment, at the start of a line or after a blank. A line with a pattern and no owners makes
  the matching paths unowned. A line GitHub cannot read is skipped, the others still apply.
- The **last** matching line wins; the others are not merged in.
- Patterns follow gitignore, except that `!` (negation), `[ ]` (character ranges) and escaping
  a leading `#` with `\\` do not work (such lines are skipped). A pattern with a `/` at its start
  or in its middle is anchored at the repository root, any other matches at any depth; `*` and
  `?` never cross a `/`; `**/`, `/**/` and a trailing `/**` span directories; a trailing `/`
  matches a directory's contents only. A pattern names a file or, as a directory, everything
  under it, except that a last segment of exactly `*` (`docs/*`) matches the directory's own
  files and no deeper ones. A space inside a path is written `\\ `.

`parse` returns every rule with its line number (what the comment cites as the reason someone
is cc'd) and every skipped line with why, and never raises on the file's content.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

LOCATIONS = (".github/CODEOWNERS", "CODEOWNERS", "docs/CODEOWNERS")
MAX_BYTES = 3 * 1024 * 1024  # GitHub does not load a CODEOWNERS file of this size or more
MAX_LINE_CHARS = 4096  # longer lines are skipped (no real pattern and owners need more)
USER = re.compile(r"@[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})")
TEAM = re.compile(r"@[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,99})")
EMAIL = re.compile(r"[^@\s]{1,64}@[A-Za-z0-9.-]{1,255}\.[A-Za-z]{2,63}")


@dataclass(frozen=True)
class Rule:
    line: int  # 1-based line number in the file
    pattern: str  # as written (escapes undone)
    owners: tuple[str, ...]  # empty: the matching paths have no owner
    regex: re.Pattern = field(repr=False, compare=False, default=None)

    def matches(self, path: str) -> bool:
        return self.regex.match(path) is not None


@dataclass(frozen=True)
class Problem:
    line: int
    message: str


@dataclass(frozen=True)
class CodeOwners:
    path: str  # where the file was read, e.g. ".github/CODEOWNERS"
    rules: tuple[Rule, ...] = ()
    problems: tuple[Problem, ...] = ()

    def rule_for(self, path: str) -> Rule | None:
        """The line that decides `path`'s owners (the last that matches), or None."""
        probe = normalise(path)
        if not probe:
            return None
        return next((rule for rule in reversed(self.rules) if rule.matches(probe)), None)

    def owners_of(self, path: str) -> tuple[str, ...]:
        rule = self.rule_for(path)
        return rule.owners if rule else ()


def normalise(path: str) -> str:
    """A repository-relative path as CODEOWNERS patterns see it: `/`-separated, no leading `./` or `/`."""
    probe = path.replace("\\", "/")
    while probe.startswith("./"):
        probe = probe[2:]
    return probe.lstrip("/")


def parse(text: str, path: str = "CODEOWNERS") -> CodeOwners:
    if len(text.encode("utf-8", "replace")) >= MAX_BYTES:
        return CodeOwners(path, (), (Problem(0, f"the file is {MAX_BYTES // (1024 * 1024)} MB or more; "
                                                "GitHub does not read it"),))
    rules, problems = [], []
    for number, raw in enumerate(text.splitlines(), start=1):
        try:
            rule = _parse_line(number, raw)
        except _Skip as skip:
            problems.append(Problem(number, str(skip)))
            continue
        if rule is not None:
            rules.append(rule)
    return CodeOwners(path, tuple(rules), tuple(problems))


class _Skip(Exception):
    """A line GitHub would skip; the message says why."""


def _parse_line(number: int, raw: str) -> Rule | None:
    if len(raw) > MAX_LINE_CHARS:
        raise _Skip(f"line is longer than {MAX_LINE_CHARS} characters")
    if raw.lstrip().startswith("\\#"):
        raise _Skip("a pattern cannot start with an escaped '#' (GitHub reads no such line)")
    words = _words(raw)
    if not words:
        return None
    pattern, owners = words[0], words[1:]
    if pattern.startswith("!"):
        raise _Skip(f"negation ('!') is not supported in CODEOWNERS: {pattern[:80]!r}")
    if "[" in pattern or "]" in pattern:
        raise _Skip(f"character ranges ('[ ]') are not supported in CODEOWNERS: {pattern[:80]!r}")
    for owner in owners:
        if not (USER.fullmatch(owner) or TEAM.fullmatch(owner) or EMAIL.fullmatch(owner)):
            raise _Skip(f"{owner[:80]!r} is not an owner (@user, @org/team or an e-mail address)")
    return Rule(number, pattern, tuple(owners), _compile(pattern))


def _words(raw: str) -> list[str]:
    """The line's words: blanks separate them, `\\ ` is a space inside one, and a `#` that starts
    a word starts a comment (the rest of the line)."""
    words, current, escaped = [], [], False
    for char in raw:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char.isspace():
            if current:
                words.append("".join(current))
                current = []
        elif char == "#" and not current:
            break
        else:
            current.append(char)
    if escaped:
        current.append("\\")
    if current:
        words.append("".join(current))
    return words


def _compile(pattern: str) -> re.Pattern:
    directory_only = pattern.endswith("/")
    body = pattern.strip("/")
    if not body:  # "/" alone names the root: every path
        return re.compile(r".+")
    anchored = pattern.startswith("/") or "/" in body
    segments = body.split("/")
    parts: list[str] = []
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            parts.append(".*" if last else "(?:.*/)?")  # a/**: anything inside; a/**/b: any depth
            continue
        parts.append(_segment(segment) + ("" if last else "/"))
    regex = "".join(parts)
    if segments[-1] == "**":
        regex = regex[:-2] + ".+"  # "a/**" is a/ followed by something
        tail = ""
    elif directory_only:
        tail = "/.+"
    elif segments[-1] == "*":
        tail = ""  # docs/*, /*: the directory's own files, not deeper ones
    else:
        tail = "(?:/.+)?"  # the file itself, or everything under the directory of that name
    head = "" if anchored else "(?:.*/)?"
    return re.compile(f"{head}{regex}{tail}\\Z", re.DOTALL)


def _segment(segment: str) -> str:
    out = []
    for char in re.split(r"(\*+|\?)", segment):
        if not char:
            continue
        if char.startswith("*"):
            out.append("[^/]*")  # "**" inside a segment is an ordinary "*"
        elif char == "?":
            out.append("[^/]")
        else:
            out.append(re.escape(char))
    return "".join(out)
