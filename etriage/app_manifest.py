"""`etriage app-manifest --public-url URL [--org ORG] [--form]`: the GitHub App manifest
(bot/github_app/manifest.json) with this deployment's URLs, for GitHub's manifest flow.

The manifest names `https://etriage.example.com`; this command puts the deployment's public
origin in its place (the webhook `/webhook`, the dashboard login's OAuth callback
`/login/callback`, the setup and redirect URL `/dashboard/`). With `--form` it prints an HTML page
whose one button POSTs the manifest to GitHub's "register a GitHub App" page of the organization
(or of the signed-in user without `--org`), as GitHub's manifest flow asks; docs/INSTALL.md says
what to do with the code GitHub then hands back. Bad input (a URL that is not an http(s) origin,
an organization name GitHub would not accept) exits 2 with one line on stderr.
"""
from __future__ import annotations

import html
import json
import re
import sys
from pathlib import Path
from urllib.parse import urlsplit

import bot

MANIFEST = Path(bot.__file__).resolve().parent / "github_app" / "manifest.json"
PLACEHOLDER = "https://etriage.example.com"
LOGIN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$")
APP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._-]{0,33}$")  # GitHub: at most 34 characters


def add_arguments(parser) -> None:
    parser.add_argument("--public-url", required=True,
                        help="where GitHub reaches this deployment, e.g. https://etriage.example.org")
    parser.add_argument("--org", help="register the App on this organization (default: your own account)")
    parser.add_argument("--name", help="the App's name (GitHub requires it to be unique; default: the manifest's)")
    parser.add_argument("--github-url", default="https://github.com", help="GitHub (Enterprise Server) web URL")
    parser.add_argument("--form", action="store_true",
                        help="print an HTML page with the button that sends the manifest to GitHub")


def run(args) -> int:
    try:
        origin = _origin(args.public_url, "--public-url")
        github = _origin(args.github_url, "--github-url")
        if args.org is not None and not LOGIN.fullmatch(args.org):
            raise ValueError(f"--org {args.org!r} is not a GitHub organization name")
        if args.name is not None and not APP_NAME.fullmatch(args.name):
            raise ValueError(f"--name {args.name!r}: letters, digits, spaces, . _ - and at most 34 characters")
    except ValueError as error:
        print(f"etriage app-manifest: {error}", file=sys.stderr)
        return 2
    manifest = manifest_for(origin, name=args.name)
    if not args.form:
        print(json.dumps(manifest, indent=2))
        return 0
    target = (f"{github}/organizations/{args.org}/settings/apps/new" if args.org
              else f"{github}/settings/apps/new")
    print(FORM.format(target=html.escape(target, quote=True),
                      manifest=html.escape(json.dumps(manifest), quote=True),
                      where=html.escape(args.org or "your account"), origin=html.escape(origin)))
    return 0


def manifest_for(origin: str, *, name: str | None = None) -> dict:
    text = MANIFEST.read_text().replace(PLACEHOLDER, origin)
    manifest = json.loads(text)
    if name:
        manifest["name"] = name
    return manifest


def _origin(url: str, option: str) -> str:
    parts = urlsplit(url.strip())
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ValueError(f"{option} {url!r} is not an http(s) URL")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(f"{option} {url!r}: give the origin only (scheme://host[:port]); "
                         "the bot's routes are at its root")
    return f"{parts.scheme}://{parts.netloc}"


FORM = """<!doctype html>
<html><head><meta charset="utf-8"><title>Register the etriage GitHub App</title></head>
<body>
<p>Registers the etriage GitHub App on {where}, with its webhook at {origin}/webhook.</p>
<form action="{target}" method="post">
<input type="hidden" name="manifest" value="{manifest}">
<button type="submit">Register the GitHub App</button>
</form>
</body></html>"""
