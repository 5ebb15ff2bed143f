"""A QNN change triaged on qnn-htp-sim for real: lowered to HTP and run on the x86 simulator in
the sandbox, through `triage` (about 2 minutes on a loaded 2-core machine: behind --run-slow)."""
from __future__ import annotations

import sys

import pytest

from tasks.pipeline.overlay import installed_package_dir
from tasks.pipeline.run import TriageOptions, triage
from tasks.qnn import sdk
from tasks.sample_repo import build_sample_repo

ANNOTATORS = "backends/qualcomm/quantizer/annotators/htp_rules.py"

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(sdk.find_sdk({}, sdk.default_root(sys.prefix))[0] is None,
                                 reason="QNN not provisioned (make install)")]


def test_a_comment_only_qnn_change_gives_no_new_failure(tmp_path):
    repo = build_sample_repo(tmp_path / "executorch", installed_package_dir(sys.executable))

    def comment(root):
        path = root / ANNOTATORS
        path.write_text(path.read_text().replace("class IndexPut(GeneralOpDef):",
                                                 "class IndexPut(GeneralOpDef):\n    # only the value is annotated", 1))

    head = repo.branch("comment-only", edit=comment)
    report = triage(TriageOptions(repo=repo.path, base="main", head=head, data_dir=tmp_path / "data",
                                  targets=["qnn-htp-sim"], suites=["qnn_probes"])).to_dict()
    verdicts = {r["test"]: r["verdict"] for r in report["results"]}
    assert not [t for t, v in verdicts.items() if v == "new"], verdicts
    # the delegate-owned cache's undefined first read is on x86 at the merge base too
    assert verdicts.get("qnn_mutable_buffer::kv_cache_qnn_in_delegate") == "pre_existing", verdicts
