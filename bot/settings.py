"""The service's settings: read once, at start, from the environment (never at import time).

`Settings.from_env(os.environ)` is the only place the web app and the worker read their
configuration. A missing or malformed setting raises `SettingsError` whose message is one line
that names the variable; `load_or_exit` turns that into `etriage: configuration error: ...` on
stderr and exit status 2 for the entry points (gunicorn's `bot.wsgi`, `etriage serve`).
"""
from __future__ import annotations

import sys
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Mapping
from urllib.parse import urlsplit, urlunsplit

MIB = 1024 * 1024
DEFAULT_MAX_BODY_BYTES = 25 * MIB  # GitHub caps webhook payloads at 25 MB
DEFAULT_DELIVERY_TTL_SECONDS = 7 * 24 * 3600  # GitHub offers redelivery of the last few days


class SettingsError(ValueError):
    """A missing or malformed setting; the message is one line naming the variable."""


@dataclass(frozen=True)
class Settings:
    webhook_secrets: tuple[str, ...]
    github_api_url: str = "https://api.github.com"
    github_token: str | None = None
    github_app_id: str | None = None
    github_private_key_path: str | None = None
    redis_url: str | None = None  # None: not configured (`etriage serve` starts an embedded one)
    database_url: str | None = None  # None: SQLite under data_dir (see `database_url_or_default`)
    data_dir: Path = field(default_factory=lambda: Path.home() / ".etriage")
    bot_login: str = "etriage[bot]"
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    delivery_ttl_seconds: int = DEFAULT_DELIVERY_TTL_SECONDS
    repo_checkouts: Mapping[str, Path] = field(default_factory=dict)

    def __post_init__(self) -> None:
        secrets = self.webhook_secrets
        if isinstance(secrets, str):  # a dict config may give "a,b" like the environment does
            object.__setattr__(self, "webhook_secrets", _split_secrets(secrets))
        else:
            object.__setattr__(self, "webhook_secrets", tuple(secrets))
        if not self.webhook_secrets or not all(self.webhook_secrets):
            raise SettingsError("ETRIAGE_WEBHOOK_SECRET is not set")
        object.__setattr__(self, "data_dir", Path(self.data_dir))
        for name in ("max_body_bytes", "delivery_ttl_seconds"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise SettingsError(f"{name} must be a positive integer, got {value!r}")
        if not self.bot_login:
            raise SettingsError("ETRIAGE_BOT_LOGIN must not be empty")

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> "Settings":
        env = {name: value.strip() for name, value in environ.items()}
        secret = env.get("ETRIAGE_WEBHOOK_SECRET", "")
        if not secret:
            raise SettingsError("ETRIAGE_WEBHOOK_SECRET is not set")
        token = env.get("ETRIAGE_GITHUB_TOKEN") or None
        app_id = env.get("ETRIAGE_GITHUB_APP_ID") or None
        key_path = env.get("ETRIAGE_GITHUB_PRIVATE_KEY_PATH") or None
        if not token and not (app_id and key_path):
            raise SettingsError(
                "set ETRIAGE_GITHUB_TOKEN, or ETRIAGE_GITHUB_APP_ID and ETRIAGE_GITHUB_PRIVATE_KEY_PATH"
            )
        if app_id and not app_id.isdigit():
            raise SettingsError(f"ETRIAGE_GITHUB_APP_ID must be a number, got {app_id!r}")
        if key_path and not token and not Path(key_path).is_file():
            raise SettingsError(f"ETRIAGE_GITHUB_PRIVATE_KEY_PATH: no such file {key_path}")
        home = Path(environ.get("HOME") or Path.home())
        data_dir = Path(env.get("ETRIAGE_DATA_DIR") or home / ".etriage").expanduser()
        return cls(
            webhook_secrets=_split_secrets(secret),
            github_api_url=_url(env, "ETRIAGE_GITHUB_API_URL", "https://api.github.com").rstrip("/"),
            github_token=token,
            github_app_id=app_id,
            github_private_key_path=key_path,
            redis_url=_url(env, "REDIS_URL", None),
            database_url=env.get("DATABASE_URL") or None,
            data_dir=data_dir,
            bot_login=env.get("ETRIAGE_BOT_LOGIN") or "etriage[bot]",
            max_body_bytes=_positive_int(env, "ETRIAGE_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES),
            delivery_ttl_seconds=_positive_int(
                env, "ETRIAGE_DELIVERY_TTL_SECONDS", DEFAULT_DELIVERY_TTL_SECONDS
            ),
            repo_checkouts=_repo_paths(env.get("ETRIAGE_REPO_PATHS", "")),
        )

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> "Settings":
        """Settings from a dict of field overrides (tests, `etriage serve`); unknown keys fail."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise SettingsError(f"unknown setting {unknown[0]!r}; known: {', '.join(sorted(known))}")
        if "webhook_secrets" not in values:
            raise SettingsError("ETRIAGE_WEBHOOK_SECRET is not set")
        return cls(**values)

    @property
    def database_url_or_default(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'etriage.db'}"

    def redacted(self) -> dict:
        """The settings as a dict that is safe to log: no secrets, tokens or URL passwords."""
        data = asdict(self)
        data["webhook_secrets"] = f"<{len(self.webhook_secrets)} secret(s)>"
        data["github_token"] = "<set>" if self.github_token else None
        data["redis_url"] = _without_password(self.redis_url)
        data["database_url"] = _without_password(self.database_url_or_default)
        data["data_dir"] = str(self.data_dir)
        data["repo_checkouts"] = {repo: str(path) for repo, path in self.repo_checkouts.items()}
        return data


def load_or_exit(environ: Mapping[str, str], *, require_redis: bool = False) -> Settings:
    """Settings for an entry point: a configuration error is one line on stderr and exit 2."""
    try:
        settings = Settings.from_env(environ)
        if require_redis and not settings.redis_url:
            raise SettingsError("REDIS_URL is not set")
        return settings
    except SettingsError as error:
        print(f"etriage: configuration error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def _split_secrets(value: str) -> tuple[str, ...]:
    secrets = tuple(part.strip() for part in value.split(","))
    if not any(secrets):
        raise SettingsError("ETRIAGE_WEBHOOK_SECRET is not set")
    if not all(secrets):
        raise SettingsError("ETRIAGE_WEBHOOK_SECRET has an empty entry (check the commas)")
    return secrets


def _url(env: Mapping[str, str], name: str, default: str | None) -> str | None:
    value = env.get(name) or default
    if value is not None and "://" not in value:
        raise SettingsError(f"{name} must be a URL with a scheme, got {_without_password(value)!r}")
    return value


def _positive_int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if not raw:
        return default
    if not raw.isdigit() or int(raw) <= 0:
        raise SettingsError(f"{name} must be a positive integer, got {raw!r}")
    return int(raw)


def _repo_paths(value: str) -> dict[str, Path]:
    """ETRIAGE_REPO_PATHS="owner/name=/path,owner2/x=/p2" -> {"owner/name": Path("/path"), ...}."""
    paths: dict[str, Path] = {}
    for entry in filter(None, (part.strip() for part in value.split(","))):
        repo, sep, path = entry.partition("=")
        repo, path = repo.strip(), path.strip()
        if not sep or not path or repo.count("/") != 1 or not all(repo.split("/")):
            raise SettingsError(
                f"ETRIAGE_REPO_PATHS entry {entry!r} is not owner/name=/path/to/clone"
            )
        paths[repo] = Path(path).expanduser()
    return paths


def _without_password(url: str | None) -> str | None:
    if not url:
        return url
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=user + host))
