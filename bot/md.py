"""The one door by which text from a run, a log, a tree or a comment enters markdown.

Everything a pull request can influence (test ids, primary lines, messages, paths, suspects,
job names, reasons, explanations built from them) is hostile: a newline in a test id can start a
`## etriage: ✅` heading of its own, a backtick can close the code around it, `<img src=…>` is a
tracking pixel, `<!-- … -->` hides text, `<details>` folds the real section away and `@team`
pings people. Renderers (tasks/summary.py, tasks/pipeline/report.py, matrix.py, bot/commands.py)
therefore put such text into markdown only through these functions:

- `code(text)`: inline code. Newlines and control characters folded to spaces, bounded, fenced
  with more backticks than any run inside (CommonMark code spans: nothing inside is markdown or
  HTML, and GitHub links no mention inside code).
- `text(text)`: plain words. The characters that open inline markdown backslash-escaped
  (emphasis, code, links and images, strikethrough, math, table cells), a leading list or
  heading marker too, `<`, `>` and `&` as entities (no raw HTML, no comment), a word joiner after
  `@` and `#` (no mention, no reference) and the `:` of `://` and the `.` of `www.` escaped (no
  autolink). Words stay readable in the markdown source: `test_x`, `a.b`, `a-b` as they are.
- `prose(text)`: a sentence of ours that interpolated such text: its `code spans` become `code()`,
  the rest `text()`. Safe whatever the input, so notes and reasons go through it. The one link
  it keeps is to an address under a prefix the caller trusts (the bot's own dashboard).
- `block(text)`: a fenced code block, its fence longer than any backtick run inside, every line
  indented as the caller's list item needs (a line indented less would end the item, and the
  fence with it).
- `cell(text)`: `code()` for a GFM table cell, whose pipes split cells even inside code.

tests/web/test_markdown.py renders hostile inputs through cmark-gfm and checks the HTML.
"""
from __future__ import annotations

import re

JOINER = "\u2060"  # WORD JOINER: invisible, and no GitHub login or issue number starts with it
# Characters that end a line or are invisible controls: folded to a space in inline text.
_FOLD = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]+")
_BLOCK_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\x85\u2028\u2029]")
_ALWAYS = frozenset("\\`*[]~|$")  # open inline markdown anywhere (`!` and `(` need a `[`)
# a list or setext marker, were it a line's start: "-", "+", "=", or "1." / "1)" followed by a space or
# nothing (CommonMark's ordered list marker; "1.4.1" is no list and reads as it is)
_LEADING = re.compile(r"^(\s*)([-+=]|\d{1,9}[.)](?=\s|$))")
_ENTITIES = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}
INLINE_LIMIT = 300
BLOCK_LIMIT = 4000


def _fold(value: object, limit: int) -> str:
    folded = _FOLD.sub(" ", str(value))
    return folded if len(folded) <= limit else folded[:limit - 1] + "…"


def code(value: object, limit: int = INLINE_LIMIT) -> str:
    """`value` as one inline code span on one line, at most `limit` characters of it."""
    inner = _fold(value, limit)
    if not inner.strip():
        return "` `" if inner else "`\u200b`"
    longest = max((len(run) for run in re.findall(r"`+", inner)), default=0)
    fence = "`" * (longest + 1)
    if inner[0] in "` " or inner[-1] in "` ":  # CommonMark strips one space each side: keep the text
        inner = f" {inner} "
    return f"{fence}{inner}{fence}"


def text(value: object, limit: int = INLINE_LIMIT) -> str:
    """`value` as plain words on one line: no markdown, HTML, link, image or mention can start."""
    folded = _fold(value, limit)
    out = []
    for i, ch in enumerate(folded):
        if ch in _ENTITIES:
            out.append(_ENTITIES[ch])
        elif ch in "@#":
            out.append(f"\\{ch}{JOINER}")
        elif ch in _ALWAYS:
            out.append("\\" + ch)
        elif ch == "_" and not (0 < i < len(folded) - 1 and folded[i - 1].isalnum() and folded[i + 1].isalnum()):
            out.append("\\_")  # only `_` inside a word can never open or close emphasis
        elif (ch == ":" and folded.startswith("//", i + 1)) or (ch == "." and folded[max(0, i - 3):i].lower() == "www"):
            out.append("\\" + ch)  # no URL for cmark-gfm's autolinker
        else:
            out.append(ch)
    escaped = "".join(out)
    leading = _LEADING.match(escaped)
    if leading:  # "1. x" or "- x" right after our "> " or "- " would nest a list
        marker = leading.group(2)
        escaped = leading.group(1) + marker[:-1] + "\\" + marker[-1] + escaped[leading.end():]
    return escaped


_URL = re.compile(r"(https?://[A-Za-z0-9._~/?=&%+-]+[A-Za-z0-9/])")


def prose(value: object, limit: int = 1000, *, links: tuple[str, ...] = ()) -> str:
    """A sentence of ours with `code` spans in it (notes, reasons, explanations): each span as
    `code()`, everything else as `text()`. Whatever the input, the result is words and code,
    and an autolink for each address under one of the `links` prefixes (ours, never a run's)."""
    trusted = tuple(prefix.rstrip("/") + "/" for prefix in links if _URL.fullmatch(prefix.rstrip("/") + "/x"))

    def words(part: str) -> str:
        if not trusted:
            return text(part, limit)
        pieces = _URL.split(part)
        return "".join(f"<{piece}>" if i % 2 and piece.startswith(trusted) else text(piece, limit)
                       for i, piece in enumerate(pieces))

    folded = _fold(value, limit)
    parts = re.split(r"(`+)", folded)
    out, i = [], 0
    while i < len(parts):
        part = parts[i]
        if part.startswith("`"):  # an opener: the span runs to the next run of the same length
            close = next((j for j in range(i + 2, len(parts), 2) if parts[j] == part), None)
            if close is not None:
                out.append(code("".join(parts[i + 1:close]), limit))
                i = close + 1
                continue
        out.append(words(part))
        i += 1
    return "".join(out)


def block(value: object, *, info: str = "", indent: str = "", limit: int = BLOCK_LIMIT,
          keep: str = "tail") -> str:
    """`value` as a fenced code block that nothing inside can close, each line after `indent`.
    `keep`: which end of a text over `limit` characters is shown ("tail" for logs)."""
    body = _BLOCK_CONTROLS.sub(" ", str(value).replace("\r\n", "\n").replace("\r", "\n")).strip("\n")
    if len(body) > limit:
        body = "…" + body[-(limit - 1):] if keep == "tail" else body[:limit - 1] + "…"
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * max(3, longest + 1)
    if not re.fullmatch(r"[\w+.-]*", info):
        info = ""
    lines = [fence + info, *body.split("\n"), fence]
    return "\n".join(indent + line for line in lines)


def cell(value: object, limit: int = INLINE_LIMIT) -> str:
    """`value` as inline code in a GFM table cell (its `|` escaped: tables split on it first)."""
    return code(value, limit).replace("|", "\\|")


def cell_text(value: object, limit: int = INLINE_LIMIT) -> str:
    """`value` as plain words in a GFM table cell (`text()` already escapes every `|`)."""
    return text(value, limit)
