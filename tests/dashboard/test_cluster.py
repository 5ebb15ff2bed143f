"""Clustering and the Wilson bound: table-driven, on real failure lines."""
from __future__ import annotations

import random

import pytest

from triage_rules.cluster import (Cluster, Clusterer, Group, cluster_groups, cluster_text, near,
                                  wilson_lower_bound)

KV = "AssertionError: buffer 'k_cache' was folded into a constant _frozen_param{n} after {p}"
ROUTE = ("ProbeFailure: [multi_method_lowering] partitioner map routed wrongly: method '{m}' was "
         "given NoDelegationPartitioner but was lowered to ['XnnpackBackend']")


@pytest.mark.parametrize("a, b, same", [
    # volatile numbers, paths and timings are normalised away before comparing
    ("RuntimeError: index 17 is out of bounds for dimension 0 with size 16 (took 3.2s)",
     "RuntimeError: index 9 is out of bounds for dimension 0 with size 8 (took 10s)", True),
    (KV.format(n=0, p="constant_prop_pass"), KV.format(n=3, p="constant_prop_pass"), True),
    # a few characters apart in a long line: near enough
    (ROUTE.format(m="decode"), ROUTE.format(m="prefill"), True),
    (KV.format(n=0, p="constant_prop_pass"), ROUTE.format(m="decode"), False),
    ("ModuleNotFoundError: No module named 'executorch.backends.qualcomm'",
     "ModuleNotFoundError: No module named 'executorch.backends.xnnpack'", False),
    ("E   AssertionError: Tensor-likes are not close!", "FileNotFoundError: libQnnHtp.so", False),
])
def test_near_texts(a, b, same):
    assert near(cluster_text(a), cluster_text(b)) is same


def test_same_fingerprint_is_one_cluster_whatever_the_text():
    clusterer = Clusterer()
    first = clusterer.add(Group("fp1", cluster_text("totally different A"), 1))
    again = clusterer.add(Group("fp1", cluster_text("nothing alike at all, Z"), 2))
    assert again.id == first.id


def test_ids_are_stable_across_reclustering_and_new_members():
    lines = [KV.format(n=i, p="constant_prop_pass") + ("!" * (i % 3)) for i in range(6)]
    lines += [ROUTE.format(m=m) for m in ("decode", "prefill", "forward")]
    groups = [Group(f"fp{i}", cluster_text(line), i) for i, line in enumerate(lines)]
    first = cluster_groups(groups)
    assert len(set(first.values())) == 2
    shuffled = groups[:]
    random.Random(3).shuffle(shuffled)
    assert cluster_groups(shuffled) == first  # order of input does not matter, first sighting does
    # a newcomer joins the existing cluster; the old ids do not move
    existing = [Cluster(cid, next(g.text for g in groups if first[g.fingerprint] == cid),
                        [fp for fp, c in first.items() if c == cid]) for cid in set(first.values())]
    clusterer = Clusterer(existing)
    newcomer = clusterer.add(Group("fpX", cluster_text(ROUTE.format(m="encode")), 99))
    assert newcomer.id == first["fp6"]


def test_prefilter_finds_what_a_full_scan_finds():
    """The n-gram prefilter may skip only clusters the edit distance would reject."""
    rng = random.Random(7)
    words = "tensor buffer method partition delegate cache index mismatch shape dtype".split()
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) for _ in range(300)]
    texts += [t + rng.choice(("", "x", "xy", " cache", " index 7")) for t in texts[:150]]  # longer partners
    clusterer = Clusterer()
    for i, text in enumerate(texts):
        found = clusterer.find(text)
        brute = next((c for c in clusterer.clusters.values() if near(text, c.text)), None)
        assert (found and found.id) == (brute and brute.id)
        clusterer.add(Group(f"fp{i}", text, i))


@pytest.mark.parametrize("hits, trials, low, high", [
    (0, 0, 0.0, 0.0), (0, 10, 0.0, 0.0), (1, 2, 0.0, 0.1), (50, 100, 0.40, 0.41),
    (10, 10, 0.72, 0.73), (1, 1000, 0.0001, 0.0006)])
def test_wilson_lower_bound(hits, trials, low, high):
    assert low <= wilson_lower_bound(hits, trials) <= high


def test_wilson_ranks_evidence_over_luck():
    assert wilson_lower_bound(1, 2) < wilson_lower_bound(20, 100)
