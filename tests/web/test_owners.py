"""Who is cc'd and why (bot.owners): the default branch's CODEOWNERS read through the real
GitHubClient from the GitHub double, where GitHub looks for it, else the bundled table."""
from __future__ import annotations

from pathlib import Path

import pytest

from bot import md, owners
from tasks.records import Suspect, Verdict
from triage_rules import Failure
from triage_rules.codeowners import parse
from triage_rules.records import Frame

REPO = "pytorch/executorch"
EXECUTORCH = (Path(__file__).parents[1] / "engine" / "fixtures" / "codeowners" / "executorch.CODEOWNERS").read_text()


def read_with(github, ref_repo=REPO):
    return lambda path: github.read_file(ref_repo, path)


@pytest.mark.parametrize("present, used", [
    ((".github/CODEOWNERS", "CODEOWNERS", "docs/CODEOWNERS"), ".github/CODEOWNERS"),
    (("CODEOWNERS", "docs/CODEOWNERS"), "CODEOWNERS"),
    (("docs/CODEOWNERS",), "docs/CODEOWNERS"),
])
def test_the_first_file_github_looks_for_is_the_one_read(github_double, github, present, used):
    for path in present:
        github_double.set_file(REPO, path, f"* @owner-of-{path.replace('/', '-').replace('.', '')}\n")
    source = owners.load_codeowners(read_with(github))
    assert source.codeowners.path == used and source.name == used


def test_no_file_or_an_unreadable_one_means_the_bundled_table_and_says_why(github_double, github):
    assert owners.load_codeowners(read_with(github)).fallback_reason == "this repository has no CODEOWNERS"
    github_double.fail("GET", r"/contents/\.github/CODEOWNERS", 403, message="Resource not accessible")
    source = owners.load_codeowners(read_with(github))
    assert source.codeowners is None and source.fallback_reason == "`.github/CODEOWNERS` could not be read"


def test_the_cache_reads_once_per_ttl(github_double, github):
    clock = [0.0]
    cache = owners.CodeOwnersCache(ttl_seconds=60, clock=lambda: clock[0])
    github_double.set_file(REPO, "CODEOWNERS", "* @first\n")
    assert cache.get(REPO, read_with(github)).codeowners.owners_of("x") == ("@first",)
    github_double.set_file(REPO, "CODEOWNERS", "* @second\n")
    assert cache.get(REPO, read_with(github)).codeowners.owners_of("x") == ("@first",)
    clock[0] = 61
    assert cache.get(REPO, read_with(github)).codeowners.owners_of("x") == ("@second",)


def new_failure(test="exir/backend/test/test_backends.py::T::test_x", *, suspects=(), frames=(),
                category="multi_method_lowering", verdict="new") -> Verdict:
    return Verdict(suite="selected", test=test, target="host", base="passed", head="failed", verdict=verdict,
                   failure=Failure(line="AssertionError: boom", line_no=3, test=test, fingerprint="f" * 12,
                                   category=category, frames=list(frames)),
                   suspects=[Suspect(path=p, symbol="f", score=1.0) for p in suspects])


CODEOWNERS = owners.Source(parse(EXECUTORCH, "CODEOWNERS"))
BUNDLED = owners.Source(None, "this repository has no CODEOWNERS")


def test_the_repositorys_last_matching_line_decides_where_the_bundled_table_would_not():
    failure = new_failure(suspects=["exir/backend/backend_api.py"])
    text = owners.cc_text(CODEOWNERS, [failure])
    # ExecuTorch writes `/exir/backend` before `/exir`: GitHub gives exir/backend/ to the /exir line
    assert "**cc** @JacobSzwejbka @larryliu0820 (from `CODEOWNERS` on the default branch)" in text
    assert ("- @JacobSzwejbka @larryliu0820: `exir/backend/backend_api.py` (changed here, where to look for "
            "`exir/backend/test/test_backends.py::T::test_x`) matched line 40 `/exir`") in text
    bundled = owners.cc_text(BUNDLED, [failure])
    assert "**cc** @cccclai @kimishpatel @JacobSzwejbka (from etriage's bundled table: this repository has no CODEOWNERS)" in bundled
    assert "matched `/exir/backend/`" in bundled


def test_a_frame_inside_the_repository_counts_and_one_outside_does_not():
    failure = new_failure(test="test_qnn::T::t", frames=[
        Frame("/opt/conda/lib/python3.10/site-packages/executorch/backends/qualcomm/builders/op_add.py", 10),
        Frame("/opt/conda/lib/python3.10/site-packages/torch/fx/graph.py", 20)])
    text = owners.cc_text(CODEOWNERS, [failure])
    assert "`backends/qualcomm/builders/op_add.py` (raised `test_qnn::T::t`'s error) matched line 12 `/backends/qualcomm`" in text


def test_an_unowned_line_ccs_nobody_and_falls_to_the_area():
    # backends/cadence is listed without owners: unowned; the category's area (/exir/backend/) then decides
    failure = new_failure(test="backends/cadence/t.py::T::t", suspects=["backends/cadence/hifi/op.cpp"])
    text = owners.cc_text(CODEOWNERS, [failure])
    assert "cadence" not in text.split("\n")[1]
    assert "the area of `multi_method_lowering` failures) matched line 40 `/exir`" in text


def test_only_new_failures_are_ccd_and_each_file_once():
    assert owners.cc_text(CODEOWNERS, [new_failure(suspects=["exir/x.py"], verdict="pre_existing")]) == ""
    text = owners.cc_text(CODEOWNERS, [new_failure(suspects=["exir/x.py"]), new_failure(suspects=["exir/x.py"])])
    assert text.count("`exir/x.py`") == 1


def test_hostile_paths_and_owners_stay_text():
    source = owners.Source(parse("* @real-owner docs@example.com\n", "CODEOWNERS"))
    failure = new_failure(suspects=["a`b/@evil/<img src=x>.py"])
    text = owners.cc_text(source, [failure])
    assert "**cc** @real-owner (" in text and "docs@example.com" not in text  # an e-mail is never mentioned
    assert md.code("a`b/@evil/<img src=x>.py", 200) in text  # inside code: no HTML, no mention


def test_the_cc_block_replaces_the_one_before():
    cc = owners.cc_text(CODEOWNERS, [new_failure(suspects=["exir/x.py"])])
    once = owners.with_cc("### CI logs\nsection", cc)
    assert owners.with_cc(once, cc) == once and once.count(owners.CC_MARKER) == 1
    assert owners.with_cc(once, "") == "### CI logs\nsection"
