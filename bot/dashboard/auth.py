"""Who may look: public repositories are readable by anyone; a private repository's pages need a
GitHub login (the App's OAuth web flow) by someone who can read it.

/login sends the browser to GitHub's /login/oauth/authorize with a random `state` kept in the
signed session; /login/callback checks it, trades the code for a user token, asks GitHub who
the user is (/user) and which repositories they can read (/user/repos), and keeps only the login
and the configured private repositories among those in the session. The token itself is
dropped: the session is signed, not encrypted. Cookies are HttpOnly, SameSite=Lax and Secure.
"""
from __future__ import annotations

import hmac
import logging
import secrets
from urllib.parse import urlencode

import requests
from flask import Blueprint, abort, redirect, render_template, request, session, url_for

from bot.dashboard.context import state
from bot.dashboard.queries import Viewer

log = logging.getLogger(__name__)
blueprint = Blueprint("dashboard_auth", __name__)
MAX_REPO_PAGES = 20  # 2,000 repositories a user can read: enough, and bounded


def viewer() -> Viewer:
    private = state().config.private_repos
    readable = set(session.get("repos") or ())
    return Viewer(login=session.get("login"), hidden=frozenset(private - readable),
                  writable=frozenset(session.get("writable") or ()))


def csrf_token() -> str:
    """The session's token that a state-changing form must send back."""
    if "csrf" not in session:
        session["csrf"] = secrets.token_urlsafe(24)
    return session["csrf"]


def check_csrf() -> None:
    if not hmac.compare_digest(session.get("csrf", "") or "\0", request.form.get("csrf", "")):
        abort(400, "The form is stale or came from another site (no matching token); reload the page.")


def require(repo: str):
    """For a page of one repository: None when the viewer may read it, else the answer to
    give (a login for a stranger, 404 for a user who may not see it: its existence is private)."""
    if viewer().may_read(repo):
        return None
    if not session.get("login"):
        return redirect(url_for("dashboard_auth.login", next=request.full_path.rstrip("?")))
    abort(404)


def _safe_next(value: str | None) -> str:
    if value and value.startswith("/") and not value.startswith("//") and "\\" not in value:
        return value
    return url_for("dashboard.overview")


@blueprint.get("/login")
def login():
    config = state().config
    if not (config.oauth_client_id and config.oauth_client_secret):
        return render_template("dashboard/message.html", title="Login is not configured",
                               message="This dashboard has no GitHub OAuth client "
                                       "(ETRIAGE_OAUTH_CLIENT_ID / ETRIAGE_OAUTH_CLIENT_SECRET); "
                                       "only public repositories can be shown."), 503
    session["oauth_state"] = secrets.token_urlsafe(24)
    session["next"] = _safe_next(request.args.get("next"))
    query = urlencode({"client_id": config.oauth_client_id, "state": session["oauth_state"],
                       "redirect_uri": url_for("dashboard_auth.callback", _external=True),
                       "allow_signup": "false"})
    return redirect(f"{config.github_web_url}/login/oauth/authorize?{query}")


@blueprint.get("/login/callback")
def callback():
    config = state().config
    expected = session.pop("oauth_state", None)
    given = request.args.get("state", "")
    if not expected or not hmac.compare_digest(expected, given):
        return _refused("The login's state does not match this browser's session (an old or forged "
                        "link). Start again from Log in.")
    code = request.args.get("code")
    if not code:
        return _refused(f"GitHub did not grant access: {request.args.get('error_description') or request.args.get('error') or 'no code'}.")
    try:
        token = _exchange(config, code)
        user = _get(state().settings.github_api_url + "/user", token).json()
        repos, writable = _repos(state().settings.github_api_url, token)
    except (requests.RequestException, ValueError, KeyError) as error:
        log.warning("GitHub login failed: %s", error)
        return _refused("GitHub could not confirm the login (see the server log); try again.", 502)
    target = session.pop("next", None)
    session.clear()  # a fresh session for the logged-in user (no fixation)
    session.permanent = True
    session["login"] = str(user["login"])
    session["repos"] = sorted(repos & config.private_repos)
    # what they may retry: only repositories the dashboard has runs of (the cookie stays small)
    session["writable"] = sorted(writable & state().dashboard.repositories())
    return redirect(_safe_next(target))


@blueprint.post("/logout")
def logout():
    check_csrf()  # another site cannot log the viewer out
    session.clear()
    return redirect(url_for("dashboard.overview"))


def _refused(message: str, status: int = 400):
    return render_template("dashboard/message.html", title="Login failed", message=message), status


def _exchange(config, code: str) -> str:
    answer = requests.post(f"{config.github_web_url}/login/oauth/access_token", timeout=10,
                           headers={"Accept": "application/json"},
                           data={"client_id": config.oauth_client_id, "client_secret": config.oauth_client_secret,
                                 "code": code})
    answer.raise_for_status()
    data = answer.json()
    if "access_token" not in data:
        raise ValueError(data.get("error_description") or data.get("error") or "no access token")
    return data["access_token"]


def _get(url: str, token: str, params=None) -> requests.Response:
    answer = requests.get(url, params=params, timeout=10, headers={
        "Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json"})
    answer.raise_for_status()
    return answer


def _repos(api_url: str, token: str) -> tuple[set[str], set[str]]:
    """The repositories the user can read, and those they can push to."""
    readable, writable, url, params = set(), set(), f"{api_url}/user/repos", {"per_page": 100}
    for _ in range(MAX_REPO_PAGES):
        answer = _get(url, token, params)
        for repo in answer.json():
            permissions = repo.get("permissions") or {}
            if permissions.get("pull", True):
                readable.add(repo["full_name"])
            if permissions.get("push") or permissions.get("admin") or permissions.get("maintain"):
                writable.add(repo["full_name"])
        url, params = answer.links.get("next", {}).get("url"), None
        if not url:
            break
    return readable, writable
