"""One root cause, one entry (issue 21, item 2): failures of one run with the same fingerprint,
or the same exception and message shape, are one entry ("1 failure, in 5 tests and 3 probes"),
and the headline counts root causes. Real failure text: the first seed thread's
SpecViolationError and its `docker exec` wrapper lines (../shared/seeds/000_*.txt)."""
from __future__ import annotations

from tasks.pipeline import compare
from tasks.pipeline.report import comment_section, headline, to_markdown
from tasks.records import BuildResult, CiReport, Plan, Report, Suspect
from tasks.records import TestResult as Outcome
from tasks.summary import ci_counts, render_ci_section
from triage_rules import classify_text

SPEC = """Traceback (most recent call last):
  File "/executorch/exir/backend/backend_api.py", line 770, in _
    _unsafe_adjust_original_program(
  File "/executorch/exir/backend/utils.py", line 455, in _unsafe_adjust_original_program
    original_program._validate()
torch._export.verifier.SpecViolationError: call_module is not valid: got a class 'fused_first_tag1'
"""
PROBE = ("ProbeFailure: [multi_method_lowering] two methods on XNNPACK + portable: partitioner map routed "
         "wrongly: method 'decode' was given NoDelegationPartitioner (expects delegates none)\n")
OTHER = "AssertionError: Tensor-likes are not close!\n"
WRAPPER = "RuntimeError: Command docker exec -t {sha} /exec failed with exit code 1\n"
SEED_SHAS = ("8b9261964e6f35861f8c195a8c3f83b070b36637827e0e5d9292fb3031573168",
             "4cb70f16f1908e5e136c052d42160f55be38bf1790a0544bf215219916563224",
             "6073b9ac9c749fbe46126e13e495ceb08897f784ce7f10676493c20b2baf4aa2")


def own_run(failing: dict[tuple[str, str], str]) -> Report:
    heads = {("selected" if suite != "probes" else suite, "host", test): Outcome(
        suite=suite, test=test, target="host", outcome="failed", message=text.strip().splitlines()[-1], text=text)
        for (suite, test), text in failing.items()}
    base = {key: Outcome(suite=key[0], test=key[2], target=key[1], outcome="passed") for key in heads}
    verdicts = compare.decide(base, heads, compare.classify_failing(heads, classify_text), {})
    plan = Plan(base="b" * 40, head="h" * 40, merge_base="m" * 40, changed_files=[], areas=["exir"], backends=[],
                suites=["selected", "probes"], targets=["host"], recipes=[])
    return Report(base="b" * 40, head="h" * 40, merge_base="m" * 40, plan=plan,
                  build=BuildResult(status="ok", kind="overlay", commit="h" * 40), results=verdicts, suites=[],
                  summary={v: n for v, n in compare.tally(verdicts).items()})


def test_one_root_in_five_tests_and_three_probes_is_one_entry_and_counts_once():
    failing = {("selected", f"exir/backend/test/test_to_backend_multi_method.py::T::test_{i}"): SPEC for i in range(5)}
    failing |= {("probes", f"multi_method::probe_{i}"): SPEC for i in range(3)}
    failing[("selected", "exir/tests/test_numerics.py::test_close")] = OTHER
    report = own_run(failing)
    assert len(report.results) == 9 and report.summary["new"] == 2
    assert headline(report).startswith("2 new failures caused by this change")
    markdown = to_markdown(report)
    assert markdown.count("1 failure, in 5 tests and 3 probes") == 1
    assert markdown.count("- **Primary line:**") == 2  # one entry per root, not per test


def test_the_same_probe_failure_in_three_probes_is_one_entry():
    report = own_run({("probes", f"multi_method::{name}"): PROBE
                      for name in ("per_method_partitioners", "two_methods_different_backends", "kv_cache_methods")})
    assert report.summary["new"] == 1
    assert "1 failure, in 3 probes" in to_markdown(report)
    from tasks.service import report_payload  # the check run counts as the comment does
    payload = report_payload("h" * 40, report)
    assert payload.check_title.startswith("1 new failure(s), 0 environment problem(s)"), payload.check_title
    assert payload.check_conclusion == "failure"
    # its counts are etriage's own runs; a reader is told where the CI jobs' failures are
    assert payload.check_summary.startswith("etriage's own rebuild and tests: 1 new failure caused by this change")
    assert "Failed CI jobs" in payload.check_summary


def ci(jobs: dict[str, str]) -> CiReport:
    found = [({"name": name, "id": i, "html_url": f"https://github.com/o/r/actions/runs/1/job/{i}"}, f)
             for i, (name, log) in enumerate(jobs.items())
             for f in classify_text(log, job_name=name, failed=True)]
    return CiReport(head="h" * 40, merge_base="m" * 40, merge_base_exact=True, jobs=list(jobs),
                    results=compare.decide_ci(found, set()))


def test_a_summary_line_and_its_traceback_are_one_failure_of_the_job():
    log = SPEC + ("FAILED exir/backend/test/test_to_backend_multi_method.py::T::test_0 - "
                  "torch._export.verifier.SpecViolationError: call_module is not valid: got a class 'fused_first_tag1'\n")
    report = ci({"pull / unittest / linux": log, "pull / unittest / macos": log})
    assert ci_counts(report) == {"new": 1}
    section = render_ci_section(report)
    assert section.count("**new**") == 1 and "1 failure, in 2 jobs" in section


def test_the_seeds_wrapper_lines_of_several_jobs_are_one_entry():
    report = ci({f"pull / test-llama-runner-linux ({i})": WRAPPER.format(sha=sha) for i, sha in enumerate(SEED_SHAS)})
    assert ci_counts(report) == {"not_in_log": 1}
    section = render_ci_section(report)
    assert section.count("**not-in-log**") == 1 and "1 failure, in 3 jobs" in section


# Real probe output of the demo's regression (multi_method_first_partitioner_for_all.patch on
# the installed ExecuTorch 1.4.1): two probes lowered different programs and found one problem.
DEMO_PROBES = {
    "multi_method::per_method_partitioners":
        "ProbeFailure: [multi_method_lowering] two methods on XNNPACK + portable: partitioner map routed wrongly: "
        "method 'decode' was given NoDelegationPartitioner (expects delegates none (portable)) but was lowered to "
        "['XnnpackBackend']\n",
    "multi_method::two_methods_different_backends":
        "ProbeFailure: [multi_method_lowering] two methods on different backends: partitioner map routed wrongly: "
        "method 'all_first' delegate executorch_call_delegate carries compile specs ['add', 'sin'], not ['method'] "
        "from its own partitioner AllNodePartitioner\n",
    "multi_method::kv_cache_methods_through_passes":
        "ProbeFailure: [multi_method_lowering] prefill (XNNPACK) + decode (portable) sharing a KV cache: after "
        "delegate lowering: method 'decode': partitioner map routed wrongly: expected delegates none (portable), "
        "got ['XnnpackBackend', 'XnnpackBackend']\n",
}


def test_the_demos_three_probes_are_one_root_cause_and_one_entry():
    """Three programs, one found at lowering and one after the walk's delegate lowering: one
    check (a method's delegates are not its partitioner's), one root, one entry."""
    report = own_run({("probes", name): text for name, text in DEMO_PROBES.items()})
    assert report.summary["new"] == 1
    assert headline(report).startswith("1 new failure caused by this change")
    markdown = to_markdown(report)
    assert markdown.count("1 failure, in 3 probes") == 1 and markdown.count("- **Primary line:**") == 1


def test_probes_that_found_different_problems_stay_apart():
    other = ("ProbeFailure: [multi_method_lowering] prefill (XNNPACK) + decode (portable) sharing a KV cache: after "
             "to_executorch (memory planning): k_cache is one buffer shared by the methods but is planned at different "
             "places ('decode' at mem_id 2 bytes [0, 192), 'prefill' at mem_id 2 bytes [192, 384)): what one method "
             "writes, the other never reads\n")
    report = own_run({("probes", "multi_method::per_method_partitioners"):
                      DEMO_PROBES["multi_method::per_method_partitioners"],
                      ("probes", "multi_method::kv_cache_methods_through_passes"): other})
    assert report.summary["new"] == 2


def test_two_roots_with_the_same_first_suspect_are_said_to_point_at_one_place():
    """The demo's regression fails a test with an AssertionError and three probes with "routed
    wrongly": two roots by their words, both at `to_backend`. Counted as two, said to be one place."""
    report = own_run({("selected", "exir/backend/test/test_to_backend_multi_method.py::T::test_two_methods"): OTHER,
                      ("probes", "multi_method::per_method_partitioners"): PROBE})
    at = Suspect(path="exir/backend/backend_api.py", line=705, symbol="to_backend", score=3.0, reason="in the traceback")
    for verdict in report.results:
        verdict.suspects = [at]
    note = ("> 2 of these 2 failures point first at the same place, `exir/backend/backend_api.py:705` `to_backend`: "
            "perhaps one cause.")
    assert report.summary["new"] == 2 and headline(report).startswith("2 new failures")
    assert to_markdown(report).count(note) == 1
    section, entries = comment_section(report, section_title="Rebuild and tests")
    assert section.count(note) == 1 and len(entries) == 2
    report.results[1].suspects = [Suspect(path="exir/program/_program.py", line=1302, symbol="to_edge", score=1.0,
                                          reason="x")]
    assert "same place" not in to_markdown(report)
