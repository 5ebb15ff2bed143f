"""The grammar of slash commands: which lines of a comment are commands and what they say.

A command is a line that starts with `/etriage` or a mention of the bot (`@etriage` or
`@etriage[bot]`), outside what GitHub does not show as text: fenced (``` / ~~~) and indented
code, code spans running over lines, block quotes, HTML comments and `<pre>` and `<code>`
elements (a hidden `<!-- /etriage ok-to-test -->` is never a command; GFM's tag filter shows
`<textarea>` and `<script>` as text, so a command there is one):

    /etriage rerun [failed|all] [--target T]...     write access
    /etriage run <suite> [on <target>] [--all]     write access (--all: suite `selected`, no budget)
    /etriage explain <failure>                     anyone (number in the summary, test id, fingerprint)
    /etriage label <name>...                       write access, names from the label allow-list
    /etriage ignore <failure> --reason "..."       write access
    /etriage ok-to-test [<sha>]                    write access: the head when written (or the one named)
    /etriage mute test|cluster <id> for <duration> because <reason>   write access (bot.mutes)
    /etriage unmute test|cluster <id>              write access
    /etriage help                                  anyone

Arguments are split like a shell would (quotes group words) but nothing from a comment ever
reaches a shell: suites, targets and labels are looked up by name in the repository's allow-lists
and anything else is refused by name. This module checks the grammar only; bot.commands checks
permissions and allow-lists and acts.
"""
from __future__ import annotations

import difflib
import re
import shlex
from collections import Counter
from dataclasses import dataclass

from bot import mutes
from bot.repo_config import NAME

MAX_COMMENT_CHARS = 65536  # GitHub's own limit for a comment body
MAX_LINE_CHARS = 1000
MAX_COMMANDS = 10
MAX_REASON_CHARS = 500
USAGE = {
    "rerun": "rerun [failed|all] [--target T]",
    "run": "run <suite> [on <target>] [--all]",
    "explain": "explain <failure>",
    "label": "label <name>...",
    "ignore": 'ignore <failure> --reason "..."',
    "ok-to-test": "ok-to-test [<sha>]",
    "mute": "mute test|cluster <id> for <duration> because <reason>",
    "unmute": "unmute test|cluster <id>",
    "help": "help",
}
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
# What renders as no text or as code: blanked (newlines kept) before lines are read. Unclosed,
# it runs to the end, as GitHub renders an unclosed comment or <pre>.
_HIDDEN = re.compile(r"<!--.*?(?:-->|\Z)|<(pre|code)\b[^>]*>.*?(?:</\1\s*>|\Z)",
                     re.IGNORECASE | re.DOTALL)


def _blank(match: re.Match) -> str:
    return re.sub(r"[^\n]", " ", match.group(0))


@dataclass(frozen=True)
class Command:
    verb: str
    line: str  # the command line as written (whitespace collapsed): audit log, edit diffs
    scope: str = ""  # rerun: "failed" | "all"
    suite: str = ""  # run
    targets: tuple[str, ...] = ()  # rerun --target, run ... on
    failure: str = ""  # explain, ignore
    labels: tuple[str, ...] = ()  # label
    reason: str = ""  # ignore
    all_tests: bool = False  # run selected --all: every relevant test, not only the budget's
    sha: str = ""  # ok-to-test <sha>: the head the maintainer reviewed (7 to 40 hex digits)
    mute_kind: str = ""  # mute, unmute: "test" | "cluster"
    mute_key: str = ""  # mute, unmute: the test id or the cluster id
    mute_seconds: int = 0  # mute: for how long


class CommandError(Exception):
    """A command line that cannot be read; `message` says why and what to write instead."""

    def __init__(self, line: str, message: str):
        super().__init__(message)
        self.line, self.message = line, message

    def __eq__(self, other) -> bool:
        return isinstance(other, CommandError) and (self.line, self.message) == (other.line, other.message)

    def __hash__(self) -> int:
        return hash((self.line, self.message))

    def __repr__(self) -> str:
        return f"CommandError({self.line!r}, {self.message!r})"


# ---- who wrote it -------------------------------------------------------------------------------

def login_stem(bot_login: str) -> str:
    """"etriage[bot]" -> "etriage" (the name people mention)."""
    return bot_login[:-5] if bot_login.lower().endswith("[bot]") else bot_login


def is_bot(login: str, user_type: str | None, bot_login: str) -> bool:
    """Bots, this one included, are never answered: no loops between bots."""
    lowered = (login or "").lower()
    return (user_type == "Bot" or lowered.endswith("[bot]")
            or lowered in {bot_login.lower(), login_stem(bot_login).lower()})


# ---- parsing ------------------------------------------------------------------------------------

def parse(body: str, bot_login: str) -> list[Command | CommandError]:
    """The commands of a comment, in order; at most MAX_COMMANDS plus an error for the rest."""
    return _capped(_parse_all(body or "", bot_login))


def new_commands(previous_body: str | None, body: str, bot_login: str) -> list[Command | CommandError]:
    """The commands of an edited comment that were not in it before the edit."""
    if previous_body is None:
        return parse(body, bot_login)
    before = Counter(item.line for item in _parse_all(previous_body, bot_login))
    fresh = []
    for item in _parse_all(body or "", bot_login):
        if before[item.line]:
            before[item.line] -= 1
        else:
            fresh.append(item)
    return _capped(fresh)


def _capped(items: list) -> list:
    if len(items) <= MAX_COMMANDS:
        return items
    extra = len(items) - MAX_COMMANDS
    return items[:MAX_COMMANDS] + [CommandError(
        "", f"only the first {MAX_COMMANDS} commands of a comment are read; {extra} more were ignored")]


def _parse_all(body: str, bot_login: str) -> list[Command | CommandError]:
    prefixes = {"/etriage", f"@{login_stem(bot_login)}".lower(), f"@{bot_login}".lower()}
    if len(body) > MAX_COMMENT_CHARS:
        if any(True for _ in _command_lines(body[:MAX_COMMENT_CHARS], prefixes)):
            return [CommandError("", f"this comment has {len(body)} characters; commands are read "
                                     f"only from comments up to {MAX_COMMENT_CHARS}")]
        return []
    return [_parse_line(rest, line) for rest, line in _command_lines(body, prefixes)]


def _command_lines(body: str, prefixes: set[str]):
    """(the text after the prefix, the whole line) of each command line outside code and quotes."""
    fence, span = "", 0  # span: the length of a backtick run opening a code span on an earlier line
    for raw in _HIDDEN.sub(_blank, body).splitlines():
        opener = _FENCE.match(raw)
        if fence:
            if opener and opener.group(1)[0] == fence[0] and len(opener.group(1)) >= len(fence) \
                    and not raw.strip().strip(fence[0]):
                fence = ""
            continue
        if opener and not span:
            fence = opener.group(1)
            continue
        if not raw.strip():
            span = 0  # a blank line ends the paragraph, and any code span with it
            continue
        inside, span = span, _open_span(raw, span)
        if inside:
            continue  # the line starts inside a code span opened above
        if len(raw.expandtabs(4)) - len(raw.expandtabs(4).lstrip(" ")) >= 4:
            continue  # indented code block
        line = "".join(" " if ch.isspace() else ch for ch in raw).strip()  # NBSP & co. too
        first, _, rest = line.partition(" ")
        if first.lower() in prefixes:
            yield rest.strip(), " ".join(line.split())


def _open_span(line: str, span: int) -> int:
    """The code span still open after `line` (the length of its backtick run; 0: none), given
    the one open before it. A run closes an open span of its length, else opens one."""
    for run in re.findall(r"`+", line):
        if not span:
            span = len(run)
        elif len(run) == span:
            span = 0
    return span


def _parse_line(rest: str, line: str) -> Command | CommandError:
    try:
        if len(line) > MAX_LINE_CHARS:
            raise CommandError(line, f"command line is longer than {MAX_LINE_CHARS} characters")
        try:
            words = [_unquote_code(word) for word in shlex.split(rest)]
        except ValueError as error:
            raise CommandError(line, f"cannot read the arguments: {error}") from None
        if not words:
            raise CommandError(line, "no command given; write `/etriage help` for the list")
        verb, args = words[0].lower(), words[1:]
        if verb not in USAGE:
            close = difflib.get_close_matches(verb, list(USAGE), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ";"
            name = f"'{verb}'" if re.fullmatch(r"[\w-]{1,30}", verb) else shown(verb)
            raise CommandError(line, f"unknown command {name}{hint} write `/etriage help` for the list")
        return _GRAMMAR[verb](line, args)
    except CommandError as error:
        return error


def _unquote_code(word: str) -> str:
    """`test_x` -> test_x: people wrap names in inline code."""
    return word[1:-1] if len(word) > 2 and word[0] == word[-1] == "`" else word


def _options(line: str, verb: str, args: list[str], allowed: dict[str, bool]):
    """(positional words, {option: [values]}); allowed maps --option -> may repeat."""
    positional, options = [], {}
    words = iter(args)
    for word in words:
        if not word.startswith("--"):
            positional.append(word)
            continue
        name, has_value, value = word.partition("=")
        if name not in allowed:
            raise CommandError(line, f"{verb}: unknown option {shown(name)}; usage: `/etriage {USAGE[verb]}`")
        value = value if has_value else next(words, "")
        if not value:
            raise CommandError(line, f"{verb}: {name} needs a value")
        if name in options and not allowed[name]:
            raise CommandError(line, f"{verb}: {name} given twice")
        options.setdefault(name, []).append(value)
    return positional, options


def _expect(line: str, verb: str, words: list[str], low: int, high: int | None) -> None:
    if len(words) < low:
        raise CommandError(line, f"{verb}: missing argument; usage: `/etriage {USAGE[verb]}`")
    if high is not None and len(words) > high:
        raise CommandError(line, f"{verb}: unexpected argument {shown(words[high])}; "
                                 f"usage: `/etriage {USAGE[verb]}`")


def _name(line: str, kind: str, word: str) -> str:
    name = word.lower()
    if not NAME.match(name):
        raise CommandError(line, f"{shown(word)} is not a {kind} name")
    return name


def _rerun(line: str, args: list[str]) -> Command:
    words, options = _options(line, "rerun", args, {"--target": True})
    _expect(line, "rerun", words, 0, 1)
    scope = words[0].lower() if words else "failed"
    if scope not in ("failed", "all"):
        raise CommandError(line, f"rerun: {shown(words[0])} is neither 'failed' nor 'all'")
    targets = tuple(_name(line, "target", t) for t in options.get("--target", []))
    return Command("rerun", line, scope=scope, targets=targets)


def _run(line: str, args: list[str]) -> Command:
    flags = [a for a in args if a.lower() == "--all"]
    if len(flags) > 1:
        raise CommandError(line, "run: --all given twice")
    words, _ = _options(line, "run", [a for a in args if a.lower() != "--all"], {})
    _expect(line, "run", words, 1, 3)
    if len(words) > 1 and (words[1].lower() != "on" or len(words) != 3):
        raise CommandError(line, f"run: expected `on <target>` after the suite; usage: `/etriage {USAGE['run']}`")
    targets = (_name(line, "target", words[2]),) if len(words) == 3 else ()
    suite = _name(line, "suite", words[0])
    if flags and suite != "selected":
        raise CommandError(line, f"run: --all applies to the suite `selected` only (the tests picked for the "
                                 f"change); {shown(words[0])} always runs whole")
    return Command("run", line, suite=suite, targets=targets, all_tests=bool(flags))


def _explain(line: str, args: list[str]) -> Command:
    words, _ = _options(line, "explain", args, {})
    _expect(line, "explain", words, 1, 1)
    return Command("explain", line, failure=words[0])


def _label(line: str, args: list[str]) -> Command:
    words, _ = _options(line, "label", args, {})
    _expect(line, "label", words, 1, None)
    return Command("label", line, labels=tuple(dict.fromkeys(words)))


def _ignore(line: str, args: list[str]) -> Command:
    words, options = _options(line, "ignore", args, {"--reason": False})
    _expect(line, "ignore", words, 1, 1)
    reason = " ".join(options.get("--reason", [""])[0].split())
    if not reason:
        raise CommandError(line, 'ignore: say why with --reason "..."')
    if len(reason) > MAX_REASON_CHARS:
        raise CommandError(line, f"ignore: the reason is longer than {MAX_REASON_CHARS} characters")
    return Command("ignore", line, failure=words[0], reason=reason)


def _ok_to_test(line: str, args: list[str]) -> Command:
    words, _ = _options(line, "ok-to-test", args, {})
    _expect(line, "ok-to-test", words, 0, 1)
    if words and not re.fullmatch(r"[0-9a-fA-F]{7,40}", words[0]):
        raise CommandError(line, f"ok-to-test: {shown(words[0])} is not a commit sha (7 to 40 hex digits)")
    return Command("ok-to-test", line, sha=words[0].lower() if words else "")


def _no_arguments(verb: str):
    def parse_verb(line: str, args: list[str]) -> Command:
        if args:
            raise CommandError(line, f"{verb} takes no arguments (got {shown(args[0])})")
        return Command(verb, line)
    return parse_verb


def _mute(line: str, args: list[str]) -> Command:
    """mute test|cluster <id> for <duration> because <reason...> (the words after `because`)."""
    lowered = [a.lower() for a in args]
    if len(args) < 2 or lowered[0] not in mutes.KINDS:
        raise CommandError(line, f"mute: say what to mute, `test <test id>` or `cluster <cluster id>`; "
                                 f"usage: `/etriage {USAGE['mute']}`")
    if len(args) < 3 or lowered[2] != "for" or "because" not in lowered[3:]:
        raise CommandError(line, f"mute: say for how long and why; usage: `/etriage {USAGE['mute']}`")
    because = lowered.index("because", 3)
    key = _mute_key(line, "mute", lowered[0], args[1])
    written = " ".join(args[3:because])
    try:
        duration = mutes.parse_duration(written)
    except mutes.MuteError as error:
        raise CommandError(line, f"mute: {shown(written)} {error}") from None
    try:
        reason = mutes.check_reason(" ".join(args[because + 1:]))
    except mutes.MuteError as error:
        raise CommandError(line, f"mute: {error}") from None
    return Command("mute", line, mute_kind=lowered[0], mute_key=key,
                   mute_seconds=int(duration.total_seconds()), reason=reason)


def _unmute(line: str, args: list[str]) -> Command:
    _expect(line, "unmute", args, 2, 2)
    return Command("unmute", line, mute_kind=args[0].lower(), mute_key=_mute_key(line, "unmute", args[0].lower(), args[1]))


def _mute_key(line: str, verb: str, kind: str, key: str) -> str:
    try:
        return mutes.check_key(kind, key)
    except mutes.MuteError as error:
        raise CommandError(line, f"{verb}: {shown(kind if kind not in mutes.KINDS else key)} {error}") from None


_GRAMMAR = {"rerun": _rerun, "run": _run, "explain": _explain, "label": _label, "ignore": _ignore,
            "ok-to-test": _ok_to_test, "mute": _mute, "unmute": _unmute, "help": _no_arguments("help")}


def shown(text: str, limit: int = 60) -> str:
    """User text for a reply: inline code (no mentions, no markdown), bounded."""
    text = " ".join(text.replace("`", "'").split())
    return f"`{text[:limit]}{'…' if len(text) > limit else ''}`"

