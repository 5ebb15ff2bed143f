"""The numbered failures of the PR comment, and where each one's evidence is.

The comment is composed from one section per kind of evidence (`pr`: the bot's own run, `ci`:
the PR's failed CI jobs), each rendered when its run finishes. Every failure entry of a section
starts with NUMBER, a placeholder (a control character: no text from a run or a log reaches
markdown with one, bot.md folds them away) that `number` turns into 1., 2., ... across the
sections in SECTION_ORDER when the comment is composed. Each section's `Entry` list, in the
same order, is stored with its run, so `/etriage explain 3` and `/etriage ignore 3` name the
entry the comment shows as 3 (`entries_at`, `find`).

An Entry is what `explain` says beyond the comment: what decided the category, what it looks
like, the suspects with their lines, the reproduce command and the evidence's addresses.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from bot import md
from triage_rules.records import dump, load

SECTION_ORDER = ("pr", "ci")
NUMBER = "\x1e"  # replaced by the entry's number when the comment is composed
MIN_PREFIX = 6  # a fingerprint prefix shorter than this names too many failures


@dataclass
class Entry:
    """One numbered failure of the comment: one root cause, however many tests showed it."""

    kind: str  # pr | ci
    verdict: str
    title: str
    category: str
    tests: list[str] = field(default_factory=list)  # test ids (pr) or "job: test" (ci), first ones
    fingerprints: list[str] = field(default_factory=list)  # of every verdict of the root
    primary_line: str = ""
    decided_by: str = ""
    confidence: float = 0.0
    decision: list[str] = field(default_factory=list)  # the engine's evidence, strongest first
    looks_like: list[dict] = field(default_factory=list)  # nearest labelled failures
    unsure: list[str] = field(default_factory=list)
    suspects: list[dict] = field(default_factory=list)  # {"path", "line", "symbol", "reason", "score"}
    explanation: str = ""
    suggestion: str = ""
    reproduce: str = ""  # a command for a contributor's own checkout of ExecuTorch
    link: str = ""  # the evidence: the CI job's log at the line, or the bot's artefact page
    script_url: str = ""  # a probe's standalone script (the bot's own runs)
    script_name: str = ""  # the file name it is served as
    artefact: str = ""  # the failure's own output (log excerpt and test text), bounded: the artefact page
    script: str = ""  # the standalone script itself (the web app serves it; see bot.repro)

    def to_dict(self) -> dict:
        return dump(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Entry":
        return load(cls, data)


# ---- what a failure looks like: the nearest labelled corpus records --------------------------
_CORPUS_URL = re.compile(r"https://[A-Za-z0-9./_#?=%&+-]{1,300}")
_GITHUB = re.compile(r"https://github\.com/([\w.-]+/[\w.-]+)/(?:(?:issues|pull)/(\d+)|commit/([0-9a-f]{7,40})"
                     r"|blob/[^/]+/(\S+))")
SIMILAR_LINE = 100  # characters of a similar failure's line shown


def source_label(source: str) -> str:
    """A corpus record's address in a few words: owner/repo#N, owner/repo@sha, a file, a host."""
    found = _GITHUB.match(source)
    if found:
        repo, number_, sha, path = found.groups()
        return (f"{repo}#{number_}" if number_ else f"{repo}@{sha[:10]}" if sha
                else f"{repo} {path.split('#', 1)[0]}")
    return re.sub(r"^https?://([^/]+).*$", r"\1", source)


def similar_failure(neighbour: dict) -> str:
    """One nearest labelled failure, as markdown: its line, its category and similarity, and where
    it was seen (a link only to an https address of plain characters). Corpus text is shipped, not
    a run's, but it is escaped all the same."""
    source = str(neighbour.get("source") or "")
    label = md.text(source_label(source), 120)
    where = f"[{label}]({source})" if _CORPUS_URL.fullmatch(source) else md.code(source, 120)
    line = str(neighbour.get("line") or "").strip()
    return (f"{md.code(line, SIMILAR_LINE) + ' ' if line else ''}({md.code(neighbour.get('category') or 'other', 60)}, "
            f"{float(neighbour.get('similarity') or 0):.2f}), {where}")


def number(sections: list[str]) -> list[str]:
    """The sections with their NUMBER placeholders made 1, 2, ... in order, across sections."""
    counter = iter(range(1, 1_000_000))
    return [re.sub(NUMBER, lambda _m: str(next(counter)), section) for section in sections]


def entries_at(runs: list[dict], head_sha: str) -> list[Entry]:
    """The comment's entries at `head_sha`, numbered as the comment numbers them: each kind's
    latest run (store `runs` rows, their `report["index"]`), in SECTION_ORDER."""
    latest: dict[str, dict] = {}
    for run in runs:
        if run["head_sha"] == head_sha and run.get("summary"):
            latest[run["kind"]] = run
    ordered = [k for k in SECTION_ORDER if k in latest] + sorted(k for k in latest if k not in SECTION_ORDER)
    entries = []
    for kind in ordered:
        for item in ((latest[kind].get("report") or {}).get("index") or []):
            entries.append(Entry.from_dict(item))
    return entries


def find(entries: list[Entry], ref: str) -> tuple[int, Entry] | None:
    """(number, entry) for a reference to a failure: its number in the comment, a test id
    (or its last `::` part, when only one test has it), or a fingerprint prefix."""
    ref = ref.strip().lstrip("#")
    if ref.isdigit():
        n = int(ref)
        return (n, entries[n - 1]) if 1 <= n <= len(entries) else None
    for n, entry in enumerate(entries, 1):
        if ref in entry.tests or any(t.endswith(f": {ref}") for t in entry.tests):
            return n, entry
    short = [(n, e) for n, e in enumerate(entries, 1)
             if any(t.rsplit("::", 1)[-1] == ref for t in e.tests)]
    if len(short) == 1:
        return short[0]
    if len(ref) >= MIN_PREFIX and re.fullmatch(r"[0-9a-fA-F]+", ref):
        hits = [(n, e) for n, e in enumerate(entries, 1) if any(f.startswith(ref.lower()) for f in e.fingerprints)]
        if len(hits) == 1:
            return hits[0]
    return None


def find_entry(store, repo: str, pr: int, ref: str) -> tuple[int, Entry] | None:
    """`find` among the entries of the comment at the PR's current head (as the store knows it)."""
    pull = store.pull_state(repo, pr)
    if pull is None:
        return None
    return find(entries_at(store.runs_for(repo, pr), pull["head_sha"]), ref)


# ---- addresses of the evidence (bot.repro serves them) ---------------------------------------
_SAFE = re.compile(r"[A-Za-z0-9_.-]{1,100}")
_HEX = re.compile(r"[0-9a-f]{6,64}")


@dataclass(frozen=True)
class Links:
    """The web app's addresses for one pull request's evidence, under the configured public
    URL (Settings.public_url); every address is "" when there is none or a part of it is not
    a plain name (a repository, a sha, a fingerprint, a probe: never text that could end a link)."""

    public_url: str
    repo: str
    pr: int

    def _base(self, head: str) -> str:
        owner, _, name = self.repo.partition("/")
        if not (self.public_url and _SAFE.fullmatch(owner) and _SAFE.fullmatch(name) and _HEX.fullmatch(head)):
            return ""
        return f"{self.public_url}/evidence/{owner}/{name}/{int(self.pr)}/{head}"

    def pr_page(self) -> str:
        owner, _, name = self.repo.partition("/")
        if not (self.public_url and _SAFE.fullmatch(owner) and _SAFE.fullmatch(name)):
            return ""
        return f"{self.public_url}/dashboard/pr/{owner}/{name}/{int(self.pr)}"

    def artefact(self, head: str, fingerprint: str) -> str:
        base = self._base(head)
        return f"{base}/{fingerprint}" if base and _HEX.fullmatch(fingerprint) else ""

    def script(self, head: str, suite: str, probe: str) -> str:
        base = self._base(head)
        ok = base and all(re.fullmatch(r"[a-z][a-z0-9_]{0,79}", part) for part in (suite, probe))
        return f"{base}/probe/{suite}/{probe}.py" if ok else ""


NO_LINKS = Links("", "", 0)


def unnumbered(section: str) -> str:
    """A section shown on its own (the dashboard's copy of a run's comment): its entries
    without numbers, which only the whole comment gives."""
    return section.replace(f"**{NUMBER}.** ", "").replace(NUMBER, "")
