"""Failure clusters across PRs and trunk, and flaky-rate bounds: pure maths, no database.

Kubernetes' triage (test-infra/triage) clusters failure text in two steps: an n-gram count
prefilter, then a bounded edit distance. Here the text is the engine's normalised primary line
(`fingerprint.normalise`: numbers, paths, shas, timings gone), cut to `MAX_TEXT` characters.

- Failures with the same fingerprint are one group before any text is compared.
- A group joins the first existing cluster whose representative text is within
  `limit(text)` edits (about 10%). The prefilter is exact, not a guess: an edit changes at most
  `N` n-grams, so a candidate must share all but `N * limit` of them; by the pigeonhole rule
  it shares at least one of the query's `N * limit + 1` rarest n-grams, and only clusters in
  those posting lists are looked at.
- A cluster's id is derived from the text of the group that founded it; groups are taken in
  order of first sighting, so re-clustering the same history gives the same ids, and a
  cluster keeps its id when new failures join it.
"""
from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from dataclasses import dataclass, field

from rapidfuzz.distance import Levenshtein

from triage_rules.fingerprint import normalise

MAX_TEXT = 240  # characters of normalised text compared (the head of a line says what it is)
N = 3  # n-gram size of the prefilter


def cluster_text(line: str) -> str:
    """The text clusters compare: the normalised line, lower-cased, cut to MAX_TEXT."""
    return normalise(line or "").lower()[:MAX_TEXT]


def limit(text: str) -> int:
    """Edits allowed between two texts of one cluster (Kubernetes: about a tenth, at least 1);
    a pair is judged by the longer text's limit."""
    return max(1, len(text) // 10)


def ngrams(text: str) -> set[str]:
    padded = f"\x02{text}\x03"
    return {padded[i:i + N] for i in range(max(1, len(padded) - N + 1))}


def near(a: str, b: str) -> bool:
    """Whether two cluster texts are within the edit limit of the longer one."""
    bound = limit(max(a, b, key=len))
    if abs(len(a) - len(b)) > bound:
        return False
    return Levenshtein.distance(a, b, score_cutoff=bound) <= bound


def cluster_id(text: str) -> str:
    return "c" + hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()[:11]


@dataclass
class Group:
    """Failures sharing one fingerprint; `first_seen` orders the groups (any sortable value)."""
    fingerprint: str
    text: str  # cluster_text of one member's primary line
    first_seen: object = 0


@dataclass
class Cluster:
    id: str
    text: str  # the founding group's text: what new groups are compared with
    fingerprints: list[str] = field(default_factory=list)


class Clusterer:
    """Incremental clustering: `add(group)` returns the cluster it joined or founded."""

    def __init__(self, clusters: list[Cluster] = ()):
        self.clusters: dict[str, Cluster] = {}
        self.by_fingerprint: dict[str, str] = {}
        self._postings: dict[str, list[str]] = defaultdict(list)  # n-gram -> cluster ids
        self._grams: dict[str, set[str]] = {}
        self._order: dict[str, int] = {}  # cluster id -> founding position
        self._length: dict[str, int] = {}  # cluster id -> length of its text
        for cluster in clusters:
            self._keep(cluster)

    def _keep(self, cluster: Cluster) -> None:
        self.clusters[cluster.id] = cluster
        self._order[cluster.id] = len(self._order)
        self._length[cluster.id] = len(cluster.text)
        grams = ngrams(cluster.text)
        self._grams[cluster.id] = grams
        for gram in grams:
            self._postings[gram].append(cluster.id)
        for fp in cluster.fingerprints:
            self.by_fingerprint.setdefault(fp, cluster.id)

    def find(self, text: str) -> Cluster | None:
        """The first cluster (in founding order) whose text is near `text`."""
        grams, size = ngrams(text), len(text)
        # A partner is at most `longest` long (longer ones are more than their limit apart), so
        # no pair's limit exceeds limit(longest): N * that + 1 rarest n-grams include a shared one.
        longest = min(MAX_TEXT, (10 * size + 9) // 9)
        rarest = sorted(grams, key=lambda g: len(self._postings.get(g, ())))[:N * max(1, longest // 10) + 1]
        shortest, length = size - limit(text), self._length
        candidates = sorted({cid for g in rarest for cid in self._postings.get(g, ())
                             if shortest <= length[cid] <= longest}, key=self._order.__getitem__)
        for cid in candidates:
            other = self.clusters[cid].text
            bound = limit(other if len(other) > size else text)
            if abs(len(other) - size) > bound:  # cheapest first: lengths, then n-grams, then edits
                continue
            theirs = self._grams[cid]
            if len(grams & theirs) < max(len(grams), len(theirs)) - N * bound:
                continue
            if Levenshtein.distance(text, other, score_cutoff=bound) <= bound:
                return self.clusters[cid]
        return None

    def add(self, group: Group) -> Cluster:
        known = self.by_fingerprint.get(group.fingerprint)
        if known:
            return self.clusters[known]
        cluster = self.find(group.text)
        if cluster is None:
            cid = cluster_id(group.text)
            while cid in self.clusters:  # two founders with one text but other fingerprints
                cid = cluster_id(cid + group.fingerprint)
            cluster = Cluster(cid, group.text, [group.fingerprint])
            self._keep(cluster)
        else:
            cluster.fingerprints.append(group.fingerprint)
            self.by_fingerprint[group.fingerprint] = cluster.id
        return cluster


def cluster_groups(groups: list[Group], existing: list[Cluster] = ()) -> dict[str, str]:
    """fingerprint -> cluster id for every group, oldest group first (stable ids)."""
    clusterer = Clusterer(existing)
    return {g.fingerprint: clusterer.add(g).id
            for g in sorted(groups, key=lambda g: (g.first_seen, g.fingerprint))}


def wilson_lower_bound(hits: int, trials: int, z: float = 1.96) -> float:
    """The lower end of the Wilson score interval (95% by default) of hits/trials: a flaky rate
    that one unlucky run out of two cannot push to the top of the list."""
    if trials <= 0:
        return 0.0
    p = hits / trials
    centre = p + z * z / (2 * trials)
    spread = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials))
    return max(0.0, (centre - spread) / (1 + z * z / trials))
