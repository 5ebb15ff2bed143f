"""GitHubClient's issues (the trunk issues) against the GitHub double over real HTTP: one issue
per marker, found again by it, never doubled by a lost answer or a retry, closed with one comment."""
from __future__ import annotations

import pytest

from bot.github_client import GitHubClient, GitHubConfig
from tests.service.github_double import GitHubDouble

REPO = "o/r"
TOKEN = "ghp_0123456789abcdefghijABCDEFGHIJ012345"
MARKER = "<!-- etriage:trunk-red c0123456789a -->"
LABEL = "etriage: trunk red"


@pytest.fixture
def double():
    with GitHubDouble() as github:
        github.add_pull(REPO, 7, "a" * 40, "b" * 40)  # issues share the pull requests' numbers
        yield github


@pytest.fixture
def gh(double) -> GitHubClient:
    return GitHubClient(GitHubConfig(base_url=double.url, token=TOKEN, seconds_between_writes=None,
                                     backoff_seconds=0.01), 1)


def test_one_issue_per_marker_created_then_edited_only_when_it_changes(double, gh):
    number, what = gh.upsert_issue(REPO, MARKER, title="Trunk red: lint", body="red on 2", label=LABEL)
    assert (number, what) == (8, "created")  # after PR #7
    [issue] = double.issues_in(REPO)
    assert issue["body"] == f"{MARKER}\nred on 2" and issue["labels"] == [LABEL] and issue["user"] == "etriage[bot]"
    assert gh.upsert_issue(REPO, MARKER, title="Trunk red: lint", body="red on 2", label=LABEL) == (8, "unchanged")
    assert gh.upsert_issue(REPO, MARKER, title="Trunk red: lint", body="red on 3", label=LABEL, number=8) == (8, "updated")
    assert len(double.requests_to("POST", r"/issues$")) == 1 and double.issues_in(REPO)[0]["edits"] == 1


def test_a_created_issue_whose_answer_was_lost_is_found_not_opened_again(double, gh):
    double.fail("POST", r"/repos/o/r/issues$", 502, applied=True)  # GitHub made it, the answer was lost
    number, what = gh.upsert_issue(REPO, MARKER, title="t", body="b", label=LABEL)
    assert len(double.issues_in(REPO)) == 1 and what == "unchanged" and number == 8


def test_a_stale_number_or_someone_elses_copy_of_the_marker_is_not_taken(double, gh):
    other, _ = gh.upsert_issue(REPO, "<!-- etriage:trunk-red c999999999aa -->", title="t", body="b", label=LABEL)
    with double.lock:  # someone quotes our marker in an issue of their own
        double.issues[(REPO, 50)] = dict(double.issues[(REPO, other)], user="someone", body=f"see {MARKER}")
    number, what = gh.upsert_issue(REPO, MARKER, title="t", body="b", label=LABEL, number=other)
    assert what == "created" and number not in (other, 50)


def test_the_marker_is_found_past_the_first_page(double, gh):
    number, _ = gh.upsert_issue(REPO, MARKER, title="t", body="b", label=LABEL)
    for index in range(100):  # newer issues with the label push ours to the second page
        gh.upsert_issue(REPO, f"<!-- etriage:trunk-red c{index:011x} -->", title="t", body="b", label=LABEL)
    assert gh.find_issue(REPO, MARKER, label=LABEL)["number"] == number
    assert gh.find_issue(REPO, MARKER, label="another label") is None


def test_closing_comments_once_and_a_closed_issue_is_reopened_by_the_next_red(double, gh):
    number, _ = gh.upsert_issue(REPO, MARKER, title="t", body="b", label=LABEL)
    said = "<!-- etriage:trunk-green c0123456789a 4444 -->\nTrunk is green again."
    double.fail("PATCH", rf"/repos/o/r/issues/{number}$", 502)  # the comment went out, the close did not
    assert gh.close_issue(REPO, number, MARKER, said) is True
    [issue] = double.issues_in(REPO)
    assert issue["state"] == "closed" and len(issue["comments"]) == 1
    assert gh.close_issue(REPO, number, MARKER, said) is False  # closed already
    assert gh.upsert_issue(REPO, MARKER, title="t", body="b again", label=LABEL, number=number) == (number, "reopened")
    assert double.issues_in(REPO)[0]["state"] == "open"
