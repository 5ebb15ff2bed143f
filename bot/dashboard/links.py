"""Links to GitHub, built only from what the history stores: the repository's full name, a PR
number, a commit sha, a check run id. A value that is not of that shape (a hostile or damaged
row) gives no link ("") rather than a link somewhere else; each part is URL-quoted and Jinja
escapes the whole as an attribute."""
from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote

REPO = re.compile(r"^[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}$")
SHA = re.compile(r"^[0-9a-fA-F]{7,64}$")


@dataclass(frozen=True)
class GitHubLinks:
    web_url: str = "https://github.com"  # DashboardConfig.github_web_url

    def _repo(self, repo) -> str | None:
        if not isinstance(repo, str) or not REPO.match(repo) or ".." in repo:
            return None
        return f"{self.web_url}/{quote(repo, safe='/')}"

    def pr(self, repo, number) -> str:
        base = self._repo(repo)
        return f"{base}/pull/{number}" if base and _positive(number) else ""

    def commit(self, repo, sha) -> str:
        base = self._repo(repo)
        return f"{base}/commit/{sha.lower()}" if base and isinstance(sha, str) and SHA.match(sha) else ""

    def checks(self, repo, sha) -> str:
        """The commit's checks page: every job and check run of that commit (a CI job's own id is
        not stored, so this is the closest page that lists it)."""
        commit = self.commit(repo, sha)
        return f"{commit}/checks" if commit else ""

    def check_run(self, repo, check_run_id) -> str:
        base = self._repo(repo)
        return f"{base}/runs/{check_run_id}" if base and _positive(check_run_id) else ""


def _positive(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1 << 63
