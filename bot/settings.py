"""The service's settings: read once, at start, from the environment (never at import time).

`Settings.from_env(os.environ)` is the only place the web app and the worker read their
configuration. A missing or malformed setting raises `SettingsError` whose message is one line
that names the variable; `load_or_exit` turns that into `etriage: configuration error: ...` on
stderr and exit status 2 for the entry points (gunicorn's `bot.wsgi`, `etriage serve`).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Annotated, Any, Mapping
from urllib.parse import urlsplit, urlunsplit

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StrictInt, StrictStr,
                      ValidationError, ValidationInfo, model_validator)

from triage_rules.yamlmodel import did_you_mean

MIB = 1024 * 1024
DEFAULT_MAX_BODY_BYTES = 25 * MIB  # GitHub caps webhook payloads at 25 MB
DEFAULT_DELIVERY_TTL_SECONDS = 7 * 24 * 3600  # GitHub offers redelivery of the last few days
ENVIRONMENT = "environment"  # the validation context of `from_env`: values are the variables' text

# variable -> setting: the one list of what the service reads from its environment
VARIABLES = {
    "ETRIAGE_WEBHOOK_SECRET": "webhook_secrets",
    "ETRIAGE_GITHUB_API_URL": "github_api_url",
    "ETRIAGE_GITHUB_GIT_URL": "github_git_url",
    "ETRIAGE_GITHUB_TOKEN": "github_token",
    "ETRIAGE_GITHUB_APP_ID": "github_app_id",
    "ETRIAGE_GITHUB_PRIVATE_KEY_PATH": "github_private_key_path",
    "REDIS_URL": "redis_url",
    "DATABASE_URL": "database_url",
    "ETRIAGE_DATA_DIR": "data_dir",
    "ETRIAGE_BOT_LOGIN": "bot_login",
    "ETRIAGE_MAX_BODY_BYTES": "max_body_bytes",
    "ETRIAGE_DELIVERY_TTL_SECONDS": "delivery_ttl_seconds",
    "ETRIAGE_REPO_PATHS": "repo_checkouts",
    "ETRIAGE_PUBLIC_URL": "public_url",
}
_VARIABLE = {setting: variable for variable, setting in VARIABLES.items()}
_SECRET = frozenset({"webhook_secrets", "github_token"})  # never echoed in an error


class SettingsError(ValueError):
    """A missing or malformed setting; the message is one line naming the variable."""


# --- validators: each names the variable, so its message is the whole line ---------------------

def _secrets(value: object) -> tuple[str, ...]:
    if isinstance(value, str):  # "a,b", as in the environment
        return _split_secrets(value)
    if not isinstance(value, (tuple, list)) or not value or not all(isinstance(v, str) and v for v in value):
        raise ValueError("ETRIAGE_WEBHOOK_SECRET is not set")
    return tuple(value)


def _url(value: str | None, info: ValidationInfo) -> str | None:
    if value is not None and "://" not in value:
        raise ValueError(f"{_VARIABLE[info.field_name]} must be a URL with a scheme, got {_without_password(value)!r}")
    return value


def _public_url(value: str) -> str:
    """http(s)://host[:port][/path], no query, fragment or password: the prefix of every link."""
    value = value.strip().rstrip("/")
    if not value:
        return ""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment \
            or parts.username is not None or not re.fullmatch(r"[A-Za-z0-9._~/%-]*", parts.path):
        raise ValueError(f"ETRIAGE_PUBLIC_URL must be an http(s) address like https://etriage.example.org, "
                         f"got {_without_password(value)!r}")
    return value


def _app_id(value: str | None) -> str | None:
    if value is not None and not value.isdigit():
        raise ValueError(f"ETRIAGE_GITHUB_APP_ID must be a number, got {value!r}")
    return value


def _whole_number(value: object, info: ValidationInfo) -> object:
    """The environment's text of a number is that number; elsewhere an int is required."""
    if info.context == ENVIRONMENT and isinstance(value, str) and value.isdigit():
        return int(value)
    return value


def _repo_paths(value: object) -> object:
    """ETRIAGE_REPO_PATHS="owner/name=/path,owner2/x=/p2" -> {"owner/name": Path("/path"), ...}."""
    if not isinstance(value, str):
        return value
    paths: dict[str, Path] = {}
    for entry in filter(None, (part.strip() for part in value.split(","))):
        repo, sep, path = entry.partition("=")
        repo, path = repo.strip(), path.strip()
        if not sep or not path or repo.count("/") != 1 or not all(repo.split("/")):
            raise ValueError(f"ETRIAGE_REPO_PATHS entry {entry!r} is not owner/name=/path/to/clone")
        paths[repo] = Path(path).expanduser()
    return paths


Url = Annotated[StrictStr, AfterValidator(_url)]
PositiveInt = Annotated[StrictInt, BeforeValidator(_whole_number), Field(gt=0, description="a positive integer")]


class Settings(BaseModel):
    """The service's settings. `from_env` reads them from the environment, `from_mapping` from
    a dict of field values (tests, `etriage serve`); unknown settings are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    webhook_secrets: Annotated[tuple[str, ...], BeforeValidator(_secrets)]
    github_api_url: Annotated[Url, AfterValidator(lambda url: url.rstrip("/"))] = "https://api.github.com"
    github_git_url: Annotated[Url, AfterValidator(lambda url: url.rstrip("/"))] | None = None  # None: from the API URL
    github_token: StrictStr | None = None
    github_app_id: Annotated[StrictStr, AfterValidator(_app_id)] | None = None
    github_private_key_path: StrictStr | None = None
    redis_url: Url | None = None  # None: not configured (`etriage serve` starts an embedded one)
    database_url: StrictStr | None = None  # None: SQLite under data_dir (see `database_url_or_default`)
    data_dir: Path = Field(default_factory=lambda: Path.home() / ".etriage")
    bot_login: Annotated[StrictStr, Field(min_length=1)] = "etriage[bot]"
    max_body_bytes: PositiveInt = DEFAULT_MAX_BODY_BYTES
    delivery_ttl_seconds: PositiveInt = DEFAULT_DELIVERY_TTL_SECONDS
    repo_checkouts: Annotated[Mapping[str, Path], BeforeValidator(_repo_paths)] = Field(default_factory=dict)
    # The web app's own address as people reach it (the dashboard, the evidence and probe scripts
    # the PR comment links to); "" links nothing.
    public_url: Annotated[StrictStr, AfterValidator(_public_url)] = ""

    @model_validator(mode="after")
    def _github_credentials(self, info: ValidationInfo) -> "Settings":
        """The service needs a way into GitHub; a dict config (tests) may go without one."""
        if info.context != ENVIRONMENT:
            return self
        if not self.github_token and not (self.github_app_id and self.github_private_key_path):
            raise ValueError("set ETRIAGE_GITHUB_TOKEN, or ETRIAGE_GITHUB_APP_ID and ETRIAGE_GITHUB_PRIVATE_KEY_PATH")
        key_path = self.github_private_key_path
        if key_path and not self.github_token and not Path(key_path).is_file():
            raise ValueError(f"ETRIAGE_GITHUB_PRIVATE_KEY_PATH: no such file {key_path}")
        return self

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> "Settings":
        """The variables of VARIABLES that are set and not blank; HOME places the data directory."""
        values: dict[str, Any] = {setting: environ[variable].strip() for variable, setting in VARIABLES.items()
                                  if (environ.get(variable) or "").strip()}
        home = Path(environ.get("HOME") or Path.home())
        values["data_dir"] = Path(values.get("data_dir") or home / ".etriage").expanduser()
        return cls._validated(values, ENVIRONMENT)

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> "Settings":
        """Settings from a dict of field overrides (tests, `etriage serve`); unknown keys fail."""
        return cls._validated(dict(values), None)

    @classmethod
    def _validated(cls, values: dict, context: str | None) -> "Settings":
        try:
            return cls.model_validate(values, context=context)
        except ValidationError as error:
            raise SettingsError(_one_line(error, values, context == ENVIRONMENT)) from None

    @property
    def git_url(self) -> str:
        """Where the worker fetches repositories (`<git_url>/owner/name.git`): the setting, else
        github.com for api.github.com, the host of a GitHub Enterprise API (`/api/v3` dropped),
        or the API's own address (the local double serves both)."""
        if self.github_git_url:
            return self.github_git_url
        api = urlsplit(self.github_api_url)
        if api.hostname == "api.github.com":
            return "https://github.com"
        return urlunsplit((api.scheme, api.netloc, api.path.rstrip("/").removesuffix("/api/v3"), "", ""))

    @property
    def database_url_or_default(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'etriage.db'}"

    def redacted(self) -> dict:
        """The settings as a dict that is safe to log: no secrets, tokens or URL passwords."""
        data = self.model_dump()
        data["webhook_secrets"] = f"<{len(self.webhook_secrets)} secret(s)>"
        data["github_token"] = "<set>" if self.github_token else None
        data["redis_url"] = _without_password(self.redis_url)
        data["database_url"] = _without_password(self.database_url_or_default)
        data["data_dir"] = str(self.data_dir)
        data["repo_checkouts"] = {repo: str(path) for repo, path in self.repo_checkouts.items()}
        return data


def _one_line(error: ValidationError, values: dict, environment: bool) -> str:
    """The first problem, naming the variable (from the environment) or the setting."""
    detail = error.errors(include_url=False)[0]
    setting = detail["loc"][0] if detail["loc"] else None
    kind = detail["type"]
    if kind == "missing":
        return f"{_VARIABLE[setting]} is not set"
    if kind == "extra_forbidden":
        known = sorted(Settings.model_fields)
        return f"unknown setting {setting!r}{did_you_mean(setting, known)}; known: {', '.join(known)}"
    if kind in ("value_error", "assertion_error"):
        return str(detail["ctx"]["error"])
    name = _VARIABLE[setting] if environment else setting
    if kind == "string_too_short":
        return f"{name} must not be empty"
    info = Settings.model_fields[setting]
    wanted = info.description or detail["msg"].removeprefix("Input should be ")  # a type error: which type
    if setting in _SECRET:  # never echoed
        return f"{name} must be {wanted}"
    value = values.get(setting)
    shown = _without_password(value) if setting.endswith("_url") and isinstance(value, str) else value
    return f"{name} must be {wanted}, got {shown!r}"


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
        raise ValueError("ETRIAGE_WEBHOOK_SECRET is not set")
    if not all(secrets):
        raise ValueError("ETRIAGE_WEBHOOK_SECRET has an empty entry (check the commas)")
    return secrets


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
