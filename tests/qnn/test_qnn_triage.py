"""QNN changes triaged on qnn-htp-sim for real: lowered to HTP and run on the x86 simulator in
the sandbox, through `triage` (about a minute each on a loaded 2-core machine: behind
--run-slow; tests/probes/test_regressions.py catches the same reversal at probe level, always on)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tasks.pipeline.overlay import installed_package_dir
from tasks.pipeline.run import TriageOptions, triage
from tasks.qnn import sdk
from tasks.sample_repo import build_sample_repo

ANNOTATORS = "backends/qualcomm/quantizer/annotators/htp_rules.py"
REGRESSIONS = Path(__file__).resolve().parents[2] / "tasks" / "probes" / "regressions"

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(sdk.find_sdk({}, sdk.default_root(sys.prefix))[0] is None,
                                 reason="QNN not provisioned (make install)")]


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return build_sample_repo(tmp_path_factory.mktemp("executorch") / "executorch", installed_package_dir(sys.executable))


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """Shared, so the merge base's QNN results are computed once for both triages."""
    return tmp_path_factory.mktemp("data")


def qnn_triage(repo, head, data_dir) -> dict:
    return triage(TriageOptions(repo=repo.path, base="main", head=head, data_dir=data_dir,
                                targets=["qnn-htp-sim"], suites=["qnn_probes"])).to_dict()


def test_a_comment_only_qnn_change_gives_no_new_failure(repo, data_dir):
    def comment(root):
        path = root / ANNOTATORS
        path.write_text(path.read_text().replace("class IndexPut(GeneralOpDef):",
                                                 "class IndexPut(GeneralOpDef):\n    # only the value is annotated", 1))

    report = qnn_triage(repo, repo.branch("comment-only", edit=comment), data_dir)
    verdicts = {r["test"]: r["verdict"] for r in report["results"]}
    assert not [t for t, v in verdicts.items() if v == "new"], verdicts
    # the delegate-owned cache's undefined first read is on x86 at the merge base too
    assert verdicts.get("qnn_mutable_buffer::kv_cache_qnn_in_delegate") == "pre_existing", verdicts


def test_the_reversed_full_layout_fix_is_a_new_qnn_op_failure_with_its_builder_as_suspect(repo, data_dir):
    """Upstream 0ed5508a77 (PR #19359) reversed: HTP refuses the graph at execution."""
    head = repo.branch("full-ignores-layout", REGRESSIONS / "qnn_full_ignores_layout_transform.patch")
    report = qnn_triage(repo, head, data_dir)
    new = [r for r in report["results"] if r["verdict"] == "new"]
    assert [r["test"] for r in new] == ["qnn_ops::layout_transformed_ops_on_htp"], report["results"]
    failure = new[0]["failure"]
    assert failure["category"] == "qnn_op_validation", failure
    assert "mismatched dim" in str(failure), failure
    assert new[0]["suspects"][0]["path"] == "backends/qualcomm/builders/op_full.py", new[0]["suspects"][:3]
