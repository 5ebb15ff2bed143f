"""Settings from the environment: every mistake is one clear line; secrets never leak."""
from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from bot.settings import Settings, SettingsError, load_or_exit

from .conftest import SECRET, sign

ROOT = Path(__file__).resolve().parents[2]
BASE = {"ETRIAGE_WEBHOOK_SECRET": "s3cret", "ETRIAGE_GITHUB_TOKEN": "ghp_token123", "HOME": "/home/bot"}


def test_defaults_from_a_minimal_environment():
    settings = Settings.from_env(BASE)
    assert settings.webhook_secrets == ("s3cret",)
    assert settings.github_api_url == "https://api.github.com"
    assert settings.github_token == "ghp_token123"
    assert settings.redis_url is None
    assert settings.data_dir == Path("/home/bot/.etriage")
    assert settings.database_url_or_default == "sqlite:////home/bot/.etriage/etriage.db"
    assert settings.bot_login == "etriage[bot]"
    assert settings.max_body_bytes == 25 * 1024 * 1024
    assert settings.delivery_ttl_seconds == 7 * 24 * 3600
    assert settings.repo_checkouts == {}


@pytest.mark.parametrize("environ, git_url", [
    ({}, "https://github.com"),
    ({"ETRIAGE_GITHUB_API_URL": "https://ghe.example.com/api/v3/"}, "https://ghe.example.com"),
    ({"ETRIAGE_GITHUB_API_URL": "http://127.0.0.1:8123"}, "http://127.0.0.1:8123"),  # the local double
    ({"ETRIAGE_GITHUB_GIT_URL": "https://git.example.com/"}, "https://git.example.com"),
])
def test_where_the_worker_fetches_from(environ, git_url):
    assert Settings.from_env(BASE | environ).git_url == git_url


def test_a_git_url_without_a_scheme_is_one_line():
    with pytest.raises(SettingsError, match="^ETRIAGE_GITHUB_GIT_URL must be a URL with a scheme, got 'github.com'$"):
        Settings.from_env(BASE | {"ETRIAGE_GITHUB_GIT_URL": "github.com"})


def test_every_variable_is_read(tmp_path):
    key = tmp_path / "app.pem"
    key.write_text("-----BEGIN RSA PRIVATE KEY-----\n")
    settings = Settings.from_env({
        "ETRIAGE_WEBHOOK_SECRET": " new , old ", "ETRIAGE_GITHUB_API_URL": "http://127.0.0.1:9/api/",
        "ETRIAGE_GITHUB_APP_ID": "12345", "ETRIAGE_GITHUB_PRIVATE_KEY_PATH": str(key),
        "REDIS_URL": "redis://:pw@redis:6379/1", "DATABASE_URL": "postgresql+psycopg://u:pw@db/etriage",
        "ETRIAGE_DATA_DIR": str(tmp_path / "data"), "ETRIAGE_BOT_LOGIN": "qnn-triage[bot]",
        "ETRIAGE_MAX_BODY_BYTES": "1048576", "ETRIAGE_DELIVERY_TTL_SECONDS": "3600",
        "ETRIAGE_REPO_PATHS": "pytorch/executorch=/src/et, me/fork = ~/fork",
        "ETRIAGE_PUBLIC_URL": " https://etriage.example.org/bot/ ",
    })
    assert settings.public_url == "https://etriage.example.org/bot"
    assert settings.webhook_secrets == ("new", "old")
    assert settings.github_api_url == "http://127.0.0.1:9/api"
    assert (settings.github_app_id, settings.github_private_key_path) == ("12345", str(key))
    assert settings.github_token is None
    assert settings.redis_url == "redis://:pw@redis:6379/1"
    assert settings.database_url_or_default == "postgresql+psycopg://u:pw@db/etriage"
    assert settings.data_dir == tmp_path / "data"
    assert settings.bot_login == "qnn-triage[bot]"
    assert (settings.max_body_bytes, settings.delivery_ttl_seconds) == (1048576, 3600)
    assert settings.repo_checkouts == {"pytorch/executorch": Path("/src/et"),
                                       "me/fork": Path("~/fork").expanduser()}


@pytest.mark.parametrize("change, message", [
    ({"ETRIAGE_WEBHOOK_SECRET": None}, "ETRIAGE_WEBHOOK_SECRET is not set"),
    ({"ETRIAGE_WEBHOOK_SECRET": "  "}, "ETRIAGE_WEBHOOK_SECRET is not set"),
    ({"ETRIAGE_WEBHOOK_SECRET": ","}, "ETRIAGE_WEBHOOK_SECRET is not set"),
    ({"ETRIAGE_WEBHOOK_SECRET": "a,,b"}, "ETRIAGE_WEBHOOK_SECRET has an empty entry (check the commas)"),
    ({"ETRIAGE_GITHUB_TOKEN": None},
     "set ETRIAGE_GITHUB_TOKEN, or ETRIAGE_GITHUB_APP_ID and ETRIAGE_GITHUB_PRIVATE_KEY_PATH"),
    ({"ETRIAGE_GITHUB_TOKEN": None, "ETRIAGE_GITHUB_APP_ID": "1"},
     "set ETRIAGE_GITHUB_TOKEN, or ETRIAGE_GITHUB_APP_ID and ETRIAGE_GITHUB_PRIVATE_KEY_PATH"),
    ({"ETRIAGE_GITHUB_TOKEN": None, "ETRIAGE_GITHUB_APP_ID": "1", "ETRIAGE_GITHUB_PRIVATE_KEY_PATH": "/no/key.pem"},
     "ETRIAGE_GITHUB_PRIVATE_KEY_PATH: no such file /no/key.pem"),
    ({"ETRIAGE_GITHUB_APP_ID": "my-app", "ETRIAGE_GITHUB_PRIVATE_KEY_PATH": "/k"},
     "ETRIAGE_GITHUB_APP_ID must be a number, got 'my-app'"),
    ({"ETRIAGE_MAX_BODY_BYTES": "25MB"}, "ETRIAGE_MAX_BODY_BYTES must be a positive integer, got '25MB'"),
    ({"ETRIAGE_MAX_BODY_BYTES": "0"}, "ETRIAGE_MAX_BODY_BYTES must be a positive integer, got '0'"),
    ({"ETRIAGE_DELIVERY_TTL_SECONDS": "-5"}, "ETRIAGE_DELIVERY_TTL_SECONDS must be a positive integer, got '-5'"),
    ({"REDIS_URL": "localhost:6379"}, "REDIS_URL must be a URL with a scheme, got 'localhost:6379'"),
    ({"ETRIAGE_GITHUB_API_URL": "api.github.com"}, "ETRIAGE_GITHUB_API_URL must be a URL with a scheme"),
    ({"ETRIAGE_REPO_PATHS": "pytorch/executorch"}, "ETRIAGE_REPO_PATHS entry 'pytorch/executorch' is not owner/name=/path/to/clone"),
    ({"ETRIAGE_REPO_PATHS": "executorch=/src"}, "ETRIAGE_REPO_PATHS entry 'executorch=/src' is not owner/name=/path/to/clone"),
    ({"ETRIAGE_REPO_PATHS": "a/b="}, "ETRIAGE_REPO_PATHS entry 'a/b=' is not owner/name=/path/to/clone"),
    # the prefix of every link in the PR comment: an http(s) address and nothing a link could carry
    ({"ETRIAGE_PUBLIC_URL": "etriage.example.org"}, "ETRIAGE_PUBLIC_URL must be an http(s) address"),
    ({"ETRIAGE_PUBLIC_URL": "javascript:alert(1)"}, "ETRIAGE_PUBLIC_URL must be an http(s) address"),
    ({"ETRIAGE_PUBLIC_URL": "https://e.org/?next=x"}, "ETRIAGE_PUBLIC_URL must be an http(s) address"),
    ({"ETRIAGE_PUBLIC_URL": "https://e.org/a)b"}, "ETRIAGE_PUBLIC_URL must be an http(s) address"),
    ({"ETRIAGE_PUBLIC_URL": "https://u:pw@e.org"}, "ETRIAGE_PUBLIC_URL must be an http(s) address like "
                                                    "https://etriage.example.org, got 'https://u:***@e.org'"),
])
def test_bad_settings_are_one_clear_line(change, message):
    environ = {**BASE, **change}
    environ = {k: v for k, v in environ.items() if v is not None}
    with pytest.raises(SettingsError) as error:
        Settings.from_env(environ)
    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value)


def test_malformed_url_error_does_not_show_its_password():
    with pytest.raises(SettingsError) as error:
        Settings.from_env({**BASE, "REDIS_URL": "//:hunter2@redis:6379"})
    assert "hunter2" not in str(error.value)


def test_redacted_settings_hold_no_secret():
    settings = Settings.from_env({**BASE, "ETRIAGE_WEBHOOK_SECRET": "s3cret,0ld",
                                  "REDIS_URL": "redis://user:redispw@redis:6379/0",
                                  "DATABASE_URL": "postgresql://etriage:dbpw@db:5432/etriage"})
    text = json.dumps(settings.redacted())
    for secret in ("s3cret", "0ld", "ghp_token123", "redispw", "dbpw"):
        assert secret not in text
    assert settings.redacted()["redis_url"] == "redis://user:***@redis:6379/0"
    assert settings.redacted()["webhook_secrets"] == "<2 secret(s)>"


def test_dict_config_overrides_fields_and_rejects_unknown_ones():
    settings = Settings.from_mapping({"webhook_secrets": "a,b", "redis_url": "redis://x/0", "max_body_bytes": 10})
    assert settings.webhook_secrets == ("a", "b") and settings.max_body_bytes == 10
    with pytest.raises(SettingsError, match="unknown setting 'redis'"):
        Settings.from_mapping({"webhook_secrets": "a", "redis": "redis://x/0"})
    with pytest.raises(SettingsError, match="ETRIAGE_WEBHOOK_SECRET is not set"):
        Settings.from_mapping({"redis_url": "redis://x/0"})
    with pytest.raises(SettingsError, match="max_body_bytes must be a positive integer"):
        Settings.from_mapping({"webhook_secrets": "a", "max_body_bytes": "10"})


@pytest.mark.parametrize("values, message", [
    ({"webhook_secrets": "a", "redis": "redis://x/0"}, "unknown setting 'redis' (did you mean 'redis_url'?); known: "),
    ({"webhook_secrets": "a", "max_body_bytes": True}, "max_body_bytes must be a positive integer, got True"),
    ({"webhook_secrets": "a", "delivery_ttl_seconds": 0}, "delivery_ttl_seconds must be a positive integer, got 0"),
    ({"webhook_secrets": "a", "bot_login": ""}, "bot_login must not be empty"),
    ({"webhook_secrets": "a", "redis_url": "redis:6379"}, "REDIS_URL must be a URL with a scheme, got 'redis:6379'"),
    ({"webhook_secrets": "a", "github_token": 12345}, "github_token must be a valid string"),
    ({"webhook_secrets": ("a", "")}, "ETRIAGE_WEBHOOK_SECRET is not set"),
    ({"webhook_secrets": "a", "repo_checkouts": "executorch=/src"},
     "ETRIAGE_REPO_PATHS entry 'executorch=/src' is not owner/name=/path/to/clone"),
])
def test_dict_config_mistakes_are_one_clear_line(values, message):
    with pytest.raises(SettingsError) as error:
        Settings.from_mapping(values)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)
    assert "12345" not in str(error.value)  # a token is never echoed


def test_dict_config_takes_text_for_paths_and_secrets():
    settings = Settings.from_mapping({"webhook_secrets": ["a", "b"], "data_dir": "/srv/etriage",
                                      "repo_checkouts": "o/r=/src/r"})
    assert settings.webhook_secrets == ("a", "b") and settings.data_dir == Path("/srv/etriage")
    assert settings.repo_checkouts == {"o/r": Path("/src/r")}
    assert Settings.from_mapping({"webhook_secrets": "a"}) == Settings(webhook_secrets=("a",))


def test_load_or_exit_prints_one_line_and_exits_2(capsys):
    with pytest.raises(SystemExit) as exit_:
        load_or_exit({"ETRIAGE_GITHUB_TOKEN": "t"})
    assert exit_.value.code == 2
    assert capsys.readouterr().err == "etriage: configuration error: ETRIAGE_WEBHOOK_SECRET is not set\n"
    with pytest.raises(SystemExit):
        load_or_exit(BASE, require_redis=True)
    assert capsys.readouterr().err == "etriage: configuration error: REDIS_URL is not set\n"


def _environment(**extra) -> dict:
    keep = {k: v for k, v in os.environ.items()
            if not k.startswith(("ETRIAGE_", "REDIS_", "DATABASE_"))}
    return {**keep, **extra}


def test_wsgi_entry_point_refuses_to_start_without_configuration():
    result = subprocess.run([sys.executable, "-c", "import bot.wsgi"], cwd=ROOT, capture_output=True,
                            text=True, env=_environment(ETRIAGE_GITHUB_TOKEN="t"), timeout=60)
    assert result.returncode == 2
    assert result.stderr == "etriage: configuration error: ETRIAGE_WEBHOOK_SECRET is not set\n"


def test_gunicorn_serves_signed_deliveries_from_the_environment(redis_url, tmp_path):
    """The production entry point for real: gunicorn, bot.wsgi:app, settings from the env."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = _environment(ETRIAGE_WEBHOOK_SECRET=SECRET, ETRIAGE_GITHUB_TOKEN="ghp_x",
                       REDIS_URL=redis_url, ETRIAGE_DATA_DIR=str(tmp_path))
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "gunicorn"), "--bind", f"127.0.0.1:{port}",
         "--workers", "1", "bot.wsgi:app"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        status, answer = _wait_for_health(port, server)
        assert (status, answer["status"]) == (200, "ok")
        body = b'{"zen": "Keep it logically awesome.", "hook_id": 1}'
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.request("POST", "/webhook", body=body, headers={
            "X-GitHub-Event": "ping", "X-GitHub-Delivery": str(uuid.uuid4()),
            "X-Hub-Signature-256": sign(body), "Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == 200
        assert json.loads(response.read())["status"] == "pong"
        # A chunked body (no Content-Length) over the limit is refused without reading it all: the
        # server answers 413 and closes while the client is still sending, so the client sees
        # either that answer or the connection cut under it. Both mean "refused"; a 2xx would not.
        try:
            connection.request("POST", "/webhook", body=iter([b"x" * 1024 * 1024] * 30), encode_chunked=True,
                               headers={"X-GitHub-Event": "ping", "X-GitHub-Delivery": str(uuid.uuid4()),
                                        "X-Hub-Signature-256": "sha256=0", "Transfer-Encoding": "chunked"})
            refused_with = connection.getresponse().status
        except (BrokenPipeError, ConnectionResetError):
            refused_with = "connection cut"
        assert refused_with in (413, "connection cut")
        # ...and the server is still up for the next delivery.
        assert _wait_for_health(port, server)[0] == 200
    finally:
        server.terminate()
        server.wait(timeout=30)


def _wait_for_health(port: int, server: subprocess.Popen):
    import time

    deadline = time.monotonic() + 60
    while True:
        if server.poll() is not None:
            pytest.fail(f"gunicorn exited: {server.stderr.read()[-2000:]}")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/healthz")
            response = connection.getresponse()
            return response.status, json.loads(response.read())
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                pytest.fail("gunicorn did not start listening within 60 s")
            time.sleep(0.1)  # polling a port that is coming up; no event to wait on
