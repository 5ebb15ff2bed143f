"""What a new organization installs: the GitHub App manifest grants exactly what the code calls
and routes (bot/github_app/permissions.yaml says which permission each call needs, and the
client's real requests are checked against it on the GitHub double), `etriage app-manifest`
fills in an organization's URLs, and `etriage config check` reports every mistake of a
`.github/etriage.yml` with a defined exit status per kind of bad input."""
from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bot import routing
from bot.github_client import GitHubClient, GitHubConfig
from etriage.dev import seed_double
from etriage.dev.github_double import GitHubDouble

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "bot" / "github_app"
MANIFEST = json.loads((APP / "manifest.json").read_text())
NEEDS = yaml.safe_load((APP / "permissions.yaml").read_text())
LEVELS = {"read": 1, "write": 2}
TOKEN = "ghs_installtest0123456789abcdefABCDEF"
ETRIAGE = [sys.executable, "-m", "etriage.cli"]


def client_methods() -> set[str]:
    return {name for name, member in inspect.getmembers(GitHubClient, inspect.isfunction) if not name.startswith("_")}


def granted(requirement: str, permissions: dict) -> bool:
    """Is "a:read|b:write" met by the manifest's default_permissions?"""
    for option in requirement.split("|"):
        name, level = option.split(":")
        if LEVELS.get(permissions.get(name), 0) >= LEVELS[level]:
            return True
    return False


def all_needs(data: dict) -> list[tuple[str, str]]:
    """(who needs it, "permission:level|...") for every method, announced call and event."""
    found = [(f"{section}.{name}", need) for section in ("methods", "announced")
             for name, entry in data[section].items() for need in entry["needs"]]
    return found + [(f"events.{event}", need) for event, need in data["events"].items() if need]


# ---- the manifest against the code -------------------------------------------------------------------
def test_every_client_method_says_which_permission_it_needs():
    listed, announced = set(NEEDS["methods"]), set(NEEDS["announced"])
    missing = client_methods() - listed
    assert not missing, (f"GitHubClient methods not in bot/github_app/permissions.yaml (say which App "
                         f"permission each needs, and add it to the manifest if it is new): {sorted(missing)}")
    assert not listed - client_methods(), f"entries for methods the client no longer has: {sorted(listed - client_methods())}"
    landed = announced & client_methods()
    assert not landed, f"announced calls that have landed: move them to `methods` with an example: {sorted(landed)}"


def test_every_routed_event_is_subscribed_and_nothing_else():
    routed = {event for event, _action in routing.HANDLERS}
    assert routed == set(NEEDS["events"]), "bot/github_app/permissions.yaml `events` must be the routed events"
    automatic = {event for event, need in NEEDS["events"].items() if need is None}  # installation: every App gets it
    assert automatic == {"installation"}
    assert set(MANIFEST["default_events"]) == routed - automatic


def test_the_manifest_grants_every_need():
    permissions = MANIFEST["default_permissions"]
    ungranted = [f"{who}: {need}" for who, need in all_needs(NEEDS) if not granted(need, permissions)]
    assert not ungranted, "the manifest does not grant:\n" + "\n".join(ungranted)


def test_the_manifest_grants_nothing_more():
    """Each permission at exactly the highest level something needs (a need met by either of two
    permissions counts for the one the manifest grants)."""
    permissions = MANIFEST["default_permissions"]
    highest: dict[str, int] = {}
    for _who, need in all_needs(NEEDS):
        options = [option.split(":") for option in need.split("|")]
        met = [(name, level) for name, level in options if LEVELS.get(permissions.get(name), 0) >= LEVELS[level]]
        for name, level in met[:1]:
            highest[name] = max(highest.get(name, 0), LEVELS[level])
    excess = {name: level for name, level in permissions.items() if LEVELS[level] > highest.get(name, 0)}
    assert not excess, f"granted beyond any need: {excess}"
    assert permissions["metadata"] == "read"  # GitHub gives every App with repository access metadata:read


def test_the_cross_check_fails_when_a_permission_is_missing():
    """The check above is not vacuous: without issues:write the comment-writing methods are unmet."""
    without = {k: v for k, v in MANIFEST["default_permissions"].items() if k != "issues"}
    unmet = {who for who, need in all_needs(NEEDS) if not granted(need, without)}
    assert {"methods.upsert_summary", "methods.add_labels", "methods.upsert_issue", "events.issue_comment"} <= unmet
    assert not granted("actions:write", {"actions": "read"})


def route_pattern(call: str) -> re.Pattern:
    verb, path = call.split(" ", 1)
    segments = re.sub(r"\\\{([a-z_]+)\\\}", lambda m: ".+" if m.group(1) == "path" else "[^/]+", re.escape(path))
    return re.compile(f"^{verb} {segments}$")  # {path}: a file path, slashes included


def test_every_method_sends_exactly_the_calls_it_lists():
    """Each client method run for real against the seeded GitHub double: every request it makes
    must match one of its `calls` (so the permissions listed for it are the ones its requests need)."""
    with GitHubDouble() as double:
        seeded = seed_double.seed(double, seed_double.DEFAULT_DIR)
        pull = seeded.pull_request
        head = double.pulls[(seeded.repository, pull.number)].head_sha
        double.set_file(seeded.repository, ".github/etriage.yml", "triage: {}\n")
        gh = GitHubClient(GitHubConfig(base_url=double.url, token=TOKEN, seconds_between_writes=None,
                                       backoff_seconds=0.01), seeded.installation)
        gh.add_labels(seeded.repository, pull.number, ["triage: multi-method"])  # for remove_label
        values = {"{head}": head,
                  "{comment}": double.add_user_comment(seeded.repository, pull.number, "Codertocat", "/etriage help"),
                  "{check_run}": gh.create_check_run(seeded.repository, head)}
        for name, entry in NEEDS["methods"].items():
            arguments = {k: values.get(v, v) if isinstance(v, str) else v for k, v in entry["example"].items()}
            before = len(double.requests)
            getattr(gh, name)(**arguments)
            if name == "upsert_summary":  # the second call edits the comment the first created
                getattr(gh, name)(**dict(arguments, body="## etriage, edited"))
            if name == "upsert_issue":  # likewise the issue; close_issue then closes it
                values["{issue}"], _how = gh.upsert_issue(**dict(arguments, body="red on 4 commits"))
            sent = [f"{r.method} {r.path}" for r in double.requests[before:]
                    if not r.path.startswith("/_logs/")]  # the pre-signed log URL: another host, no token
            patterns = [route_pattern(call) for call in entry["calls"]]
            unlisted = [s for s in sent if not any(p.match(s) for p in patterns)]
            assert not unlisted, f"GitHubClient.{name} sent requests its `calls` do not list: {unlisted}"
            unused = [c for c, p in zip(entry["calls"], patterns) if not any(p.match(s) for s in sent)]
            assert not unused, f"GitHubClient.{name} lists calls it did not make: {unused}"


def test_route_patterns_match_only_their_route():
    pattern = route_pattern("GET /repos/{owner}/{repo}/pulls/{pull_number}")
    assert pattern.match("GET /repos/o/r/pulls/2")
    assert not pattern.match("GET /repos/o/r/pulls/2/files") and not pattern.match("POST /repos/o/r/pulls/2")
    assert route_pattern("GET /repos/{owner}/{repo}/contents/{path}").match("GET /repos/o/r/contents/.github/a.yml")


def test_the_manifest_has_githubs_keys_and_the_bots_urls():
    known = {"name", "url", "hook_attributes", "redirect_url", "callback_urls", "setup_url", "description",
             "public", "default_events", "default_permissions", "request_oauth_on_install", "setup_on_update"}
    assert set(MANIFEST) <= known and {"url", "hook_attributes"} <= set(MANIFEST)
    assert MANIFEST["hook_attributes"]["url"].endswith("/webhook")  # bot/webhooks.py
    assert [u.rsplit("/", 2)[-2:] for u in MANIFEST["callback_urls"]] == [["login", "callback"]]  # dashboard login
    from bot.app import create_app

    app = create_app({"webhook_secrets": ["s"], "redis_url": "redis://127.0.0.1:1/0"}, redis_client=object())
    rules = {rule.rule for rule in app.url_map.iter_rules()}
    assert {"/webhook", "/login/callback", "/dashboard/"} <= rules


def test_app_manifest_fills_in_an_organizations_urls():
    result = subprocess.run(ETRIAGE + ["app-manifest", "--public-url", "https://triage.example.org/"],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    manifest = json.loads(result.stdout)
    assert manifest["hook_attributes"]["url"] == "https://triage.example.org/webhook"
    assert manifest["callback_urls"] == ["https://triage.example.org/login/callback"]
    assert manifest["default_permissions"] == MANIFEST["default_permissions"]
    form = subprocess.run(ETRIAGE + ["app-manifest", "--public-url", "https://triage.example.org", "--org",
                                     "my-org", "--form"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert form.returncode == 0, form.stderr
    assert 'action="https://github.com/organizations/my-org/settings/apps/new"' in form.stdout
    assert "https://triage.example.org/webhook" in form.stdout and "<script" not in form.stdout
    for bad in (["--public-url", "ftp://x"], ["--public-url", "https://x", "--org", "a/b\"><x"],
                ["--public-url", "https://x/path?q=1"]):
        result = subprocess.run(ETRIAGE + ["app-manifest", *bad], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert result.returncode == 2 and "Traceback" not in result.stderr, (bad, result.stderr)


# ---- etriage config check ------------------------------------------------------------------------------
def config_check(tmp_path: Path, content: bytes | None, *args: str, stdin: bytes | None = None):
    target = tmp_path / "etriage.yml"
    if content is not None:
        target.write_bytes(content)
    return subprocess.run(ETRIAGE + ["config", "check", *(args or [str(target)])], cwd=ROOT, capture_output=True,
                          timeout=60, input=stdin)


def test_config_check_of_a_valid_file_exits_0(tmp_path):
    result = config_check(tmp_path, b"triage:\n  suites: [multi_method]\n  budget_seconds: 120\ncommands:\n")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.decode().strip().endswith("valid; sections on: triage, commands")


def test_config_check_of_an_empty_file_says_every_feature_is_off(tmp_path):
    result = config_check(tmp_path, b"")
    assert result.returncode == 0 and b"an empty file turns every feature off" in result.stdout


def test_config_check_lists_every_mistake_with_its_key_path_in_one_pass(tmp_path):
    text = (b"tirage: {}\n"               # line 1: unknown key
            b"triage:\n"
            b"  suites: [multi_method, nope]\n"   # line 3: a suite that does not exist
            b"  budget_seconds: 5\n"       # line 4: out of range
            b"labels:\n"
            b"  bogus: x\n"                # line 6: not a category
            b"devices:\n"
            b"  targets: [host]\n")        # line 8: not a device target
    result = config_check(tmp_path, text)
    assert result.returncode == 1
    lines = result.stdout.decode().splitlines()
    name = str(tmp_path / "etriage.yml")
    assert [line.split(": ")[1:3] for line in lines] == [
        ["line 1", "top level"], ["line 3", "triage.suites[1]"], ["line 4", "triage.budget_seconds"],
        ["line 6", "labels.bogus"], ["line 8", "devices.targets[0]"]]
    assert all(line.startswith(f"{name}: line ") for line in lines)
    assert "5 mistakes" in result.stderr.decode()


def test_dangling_names_are_reported_beside_schema_mistakes():
    from bot.repo_config import validate_repo_config

    errors = validate_repo_config("triage:\n  suites: [nope]\nci_logs:\n  max_bytes: 0\n")
    assert [e.split(":")[0] for e in errors] == ["line 2", "line 4"]
    # when the custom suites themselves are wrong, an unknown suite cannot be told apart
    assert len(validate_repo_config("suites: [a]\ntriage:\n  suites: [nope]\n")) == 1


@pytest.mark.parametrize("content, args, stdin, why", [
    (None, None, None, "no such file"),
    (b"triage: [host\n", None, None, "line 2: not valid YAML"),
    (b"a: 1\n---\nb: 2\n", None, None, "not valid YAML: expected a single document"),
    (b"\x89PNG\r\n\x1a\n\0\0", None, None, "is binary"),
    (b"triage:\n  trusted: [caf\xe9]\n", None, None, "is not UTF-8 text (byte 23)"),
    (b"", ["{dir}"], None, "is a directory"),
    (None, ["-"], b"triage: *nothing\n", "<stdin>: line 1: not valid YAML"),
])
def test_config_check_of_what_cannot_be_checked_exits_2(tmp_path, content, args, stdin, why):
    args = [a.replace("{dir}", str(tmp_path)) for a in args] if args else []
    result = config_check(tmp_path, content, *args, stdin=stdin)
    assert result.returncode == 2, result.stdout + result.stderr
    assert why in result.stderr.decode() and b"Traceback" not in result.stderr
    assert result.stdout == b""


def test_config_check_reads_standard_input(tmp_path):
    result = config_check(tmp_path, None, "-", stdin=b"triage:\n  targets: [hots]\n")
    assert result.returncode == 1
    assert result.stdout.decode().startswith("<stdin>: line 2: triage.targets[0]: unknown target 'hots'")


def test_config_check_without_a_file_is_a_usage_error(tmp_path):
    result = subprocess.run(ETRIAGE + ["config", "check"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "usage: etriage config check" in result.stderr


# ---- docs/INSTALL.md says what the code does -------------------------------------------------------
INSTALL = (ROOT / "docs" / "INSTALL.md").read_text()


def test_install_names_only_variables_the_configuration_lists():
    named = set(re.findall(r"`((?:ETRIAGE|REDIS|DATABASE)_[A-Z_]+)`", INSTALL))
    documented = set(re.findall(r"`((?:ETRIAGE|REDIS|DATABASE)_[A-Z_]+)`", (ROOT / "docs" / "CONFIGURATION.md").read_text()))
    assert named and not named - documented, f"not in docs/CONFIGURATION.md: {sorted(named - documented)}"


def test_install_describes_every_procfile_process():
    procfile = {line.split(":", 1)[0] for line in (ROOT / "Procfile").read_text().splitlines()
                if line and not line.startswith("#")}
    table = INSTALL[INSTALL.index("## 4."):INSTALL.index("## 5.")]
    described = set(re.findall(r"^\| `([a-z-]+)` \|", table, re.M))
    assert described == procfile


def test_install_lists_the_manifests_permissions_and_events():
    table = INSTALL[INSTALL.index("| Permission |"):INSTALL.index("Events:")]
    rows = re.findall(r"^\| ([A-Z][a-z ]+) \| (read|write) \|", table, re.M)
    assert {name.lower().replace(" ", "_"): level for name, level in rows} == MANIFEST["default_permissions"]
    events = INSTALL[INSTALL.index("Events:"):INSTALL.index("Fill in your origin")]
    assert set(re.findall(r"`([a-z_]+)`", events)) - {"installation"} == set(MANIFEST["default_events"])


def test_the_upgrade_step_brings_the_schema_up(tmp_path):
    [command] = re.findall(r"DATABASE_URL=\.\.\. (\.venv/bin/python -c .+)$", INSTALL, re.M)
    url = f"sqlite:///{tmp_path / 'etriage.db'}"
    argv = [sys.executable, "-c", re.search(r'-c "(.+)"$', command).group(1)]
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={"PATH": "/usr/bin:/bin", "DATABASE_URL": url})
    assert result.returncode == 0, result.stderr
    import sqlite3

    [(version,)] = sqlite3.connect(tmp_path / "etriage.db").execute("SELECT version_num FROM alembic_version")
    newest = sorted(p.name for p in (ROOT / "bot" / "migrations" / "versions").glob("[0-9]*.py"))[-1]
    assert newest.startswith(version[:4])
