"""Stage 5, report: the Report as JSON (machines) and markdown (the future PR comment).

Every value from the run, its logs or the change's tree enters the markdown through bot.md
(`code`, `text`, `prose`, `block`): a test id or a primary line cannot make a heading, a link,
an image, raw HTML or a mention, nor close the code around it."""
from __future__ import annotations

import json
from collections import defaultdict

from bot import md
from bot.evidence import NO_LINKS, NUMBER, Entry, Links, similar_failure
from tasks.pipeline.compare import by_root, spread
from tasks.pipeline.matrix import matrix
from tasks.probes import standalone
from tasks.records import Report, Verdict
from triage_rules.linekinds import raised
from triage_rules.records import Failure, dump


def to_json(report: Report) -> str:
    """The whole report, every test of every suite included (`Report.from_dict` reads it back)."""
    return json.dumps(dump(report), indent=2)


def headline(report: Report) -> str:
    s = report.summary
    if report.plan.refused:
        return f"Refused: {md.prose(report.plan.refused.removeprefix('refused: '), 300)}"
    if report.plan.docs_only or not report.plan.suites:
        return "Nothing to run for this change: " + ("; ".join(md.prose(n) for n in report.plan.notes)
                                                     or "no suites apply")
    if report.build.status == "failed" and not report.results:
        return f"The build failed: {md.prose(report.build.reason)}"
    new = s.get("new", 0)
    parts = [f"{new} new failure{'s' if new != 1 else ''} caused by this change",
             f"{s.get('pre_existing', 0)} pre-existing", f"{s.get('flaky', 0)} flaky",
             f"{s.get('environment', 0)} environment"]
    if s.get("not_in_log"):
        parts.append(f"{s['not_in_log']} with the real error not in the log")
    if s.get("fixed"):
        parts.append(f"{s['fixed']} fixed")
    if s.get("not_run"):
        parts.append(f"{s['not_run']} suite run(s) not run")
    return ", ".join(parts)


def _one_place(groups: list[list[Verdict]]) -> list[str]:
    """Roots kept apart by their words can still be one change's one mistake: when two or more
    new root causes have the same first suspect, the comment says so once (the counts stay)."""
    places: dict[tuple, int] = defaultdict(int)
    for group in groups:
        if group[0].suspects:
            first = group[0].suspects[0]
            places[(first.path, first.line or 0, first.symbol or "")] += 1
    notes = [f"> {n} of these {len(groups)} failures point first at the same place, "
             f"{md.code(path + (f':{line}' if line else ''), 160)}{' ' + md.code(symbol, 80) if symbol else ''}: "
             "perhaps one cause." for (path, line, symbol), n in places.items() if n > 1]
    return notes + [""] if notes else []


def _section(group: list[Verdict], h: str) -> list[str]:
    first = group[0]
    failure = first.failure or Failure(line="", line_no=0)
    title = md.text(failure.title or failure.category, 120)
    lines = [f"{h}# {title}: 1 failure, {md.text(spread(group), 200)}", ""]
    how = (f" (decided by {md.code(failure.decided_by, 80)}, confidence {failure.confidence:.2f})"
           if failure.decided_by else f" (rule {md.code(failure.rule, 80)})" if failure.rule else "")
    lines.append(f"- **Category:** {first.category_words}{how}")
    lines.append(f"- **Primary line:** {md.code(failure.line.strip())}")
    if said := raised(failure):  # the line is the test's section header: what it raised, beside it
        lines.append(f"- **Raised:** {md.code(said)}")
    if failure.explanation:
        lines.append(f"- **Why:** {md.prose(failure.explanation)}")
    if failure.suggestion:
        lines.append(f"- **Next step:** {md.prose(failure.suggestion)}")
    if failure.looks_like:
        lines.append("- **Looks like** (the nearest labelled failures):")
        lines.extend(f"  - {similar_failure(n)}" for n in failure.looks_like[:3])
    lines.append("- **Tests:** " + ", ".join(f"{md.code(v.test)} ({md.text(v.target, 60)})" for v in group[:10])
                 + (f" and {len(group) - 10} more" if len(group) > 10 else ""))
    if first.suspects:
        lines.append("- **Where to look:**")
        lines.extend(f"  - {md.code(s.path + (f':{s.line}' if s.line else ''))} {md.code(s.symbol or '(file)', 120)} "
                     f"(score {s.score:g}: {md.prose(s.reason, 300)})" for s in first.suspects)
    lines += ["", "Reproduce locally:", md.block(first.reproduce, limit=2000, keep="head")]
    if first.log_excerpt:
        lines += ["<details><summary>log excerpt</summary>", "",
                  md.block(first.log_excerpt.strip(), limit=2500), "", "</details>"]
    return lines + [""]


def _base_line(b) -> str:
    how = {"cache": "known from cache", "ran": "ran", "cache+ran": "partly from cache, rest ran",
           "not_needed": "nothing needed (no failure at head needs it)"}.get(b.source, b.source)
    ran = f", {len(b.ran)} test(s) run" if b.ran else ""
    return (f"- {md.text(b.suite, 80)} on {md.text(b.target, 80)}: {md.text(how, 80)}{ran}; "
            + ("whole suite known" if b.complete else "partial (no `fixed`)"))


MISS_KINDS = {"budget": "over the time budget", "run_budget": "over the time budget at run time",
              "files": "over the file budget", "needs": "need what this worker lacks",
              "excluded": "excluded by the tables"}
MISSES_SHOWN, MISS_MODULES_SHOWN = 5, 8


def _misses(plan, h: str) -> list[str]:
    """Per changed file, the relevant tests this run did not check and why: what a reviewer
    must not take as tested. The whole list is in the JSON report."""
    if not plan.left_out:
        return []
    by_module: dict[str, list] = defaultdict(list)
    for item in plan.left_out:
        by_module[item.module or "(the change)"].append(item)
    lines = [f"{h} Relevant but not run", "",
             f"Tests relevant to the change that this run did not check (budget {plan.budget_seconds:.0f}s). "
             "`/etriage run selected --all` runs every one of them that can run here.", ""]
    for module, items in sorted(by_module.items(), key=lambda kv: -len(kv[1]))[:MISS_MODULES_SHOWN]:
        counts = defaultdict(int)
        for item in items:
            counts[item.why or "budget"] += 1
        lines.append(f"- {md.code(module)}: {len(items)} test file(s) not run: "
                     + ", ".join(f"{n} {md.text(MISS_KINDS.get(why, why), 80)}" for why, n in counts.items()))
        lines += [f"  - {md.code(t.path)}: {md.prose(t.reason.rpartition(' -- ')[2], 300)}"
                  for t in items[:MISSES_SHOWN]]
        if len(items) > MISSES_SHOWN:
            lines.append(f"  - and {len(items) - MISSES_SHOWN} more (in the JSON report)")
    if len(by_module) > MISS_MODULES_SHOWN:
        lines.append(f"- and {len(by_module) - MISS_MODULES_SHOWN} more changed file(s) (in the JSON report)")
    return lines + [""]


def _environments(report: Report) -> list[tuple[str, object]]:
    """(side, environment) of each commit whose environment the run made or tried: the side named
    by the commit, not by the field (a run that ends on the merge base's environment carries it
    as its build's)."""
    sides = {report.head: "head", report.merge_base: "merge base"}
    seen, found = set(), []
    for env in (report.build.environment, report.base_environment):
        if env and env.commit not in seen:
            seen.add(env.commit)
            found.append((sides.get(env.commit, "commit"), env))
    return found


def _not_run(suites) -> list[str]:
    """One line per reason: a run that could not start leaves every suite on every target with
    the same one, said once with what it kept from running."""
    by_reason: dict[str, dict[str, list[str]]] = defaultdict(dict)
    for s in suites:
        by_reason[s.reason].setdefault(s.suite, []).append(s.target)
    lines = []
    for reason, suites_there in by_reason.items():
        by_targets: dict[tuple[str, ...], list[str]] = defaultdict(list)  # "a, b on host, qnn-htp-sim"
        for suite, targets in suites_there.items():
            by_targets[tuple(targets)].append(suite)
        runs = "; ".join(f"{md.text(', '.join(names), 300)} on {md.text(', '.join(targets), 160)}"
                         for targets, names in by_targets.items())
        lines.append(f"- {runs}: not run: {md.prose(reason, 500)}")
    return lines


def _environment(env) -> str:
    """One commit's environment in a few words: where its compiled parts come from, its torch."""
    if env.status != "ok":
        return f"could not be made ({md.prose(env.reason, 160)})"
    release = md.text(env.release, 60)
    parts = {"wheel": f"the wheel's compiled parts ({release})", "registry": f"the {release} registry wheel",
             "built": "compiled parts built from its sources"}.get(env.compiled) or md.text(env.compiled, 60)
    health = ("" if env.healthy is None else ", healthy" if env.healthy
              else f", not healthy ({md.prose(env.health, 120)})")
    return f"its tree over {parts}, torch {md.text(env.torch, 60)}{health}"


def to_markdown(report: Report, *, section_title: str | None = None) -> str:
    """The report as a stand-alone comment (`## etriage: <headline>` first) or, with
    `section_title`, as one section of a larger comment: `### <section_title>` instead of the
    headline, and every heading of the report two levels further down."""
    plan = report.plan
    h = "####" if section_title else "##"  # the level of the report's own headings
    top = f"### {section_title}" if section_title else f"## etriage: {headline(report)}"
    lines = [top, "",
             f"{md.code(f'{report.merge_base[:12]}..{report.head[:12]}')} (base {md.code(report.base[:12])}), "
             f"{len(plan.changed_files)} changed file(s); areas: {md.text(', '.join(plan.areas) or '-')}; "
             f"backends: {md.text(', '.join(plan.backends) or '-')}; build: {md.text(report.build.status, 40)}"
             + (f" ({md.prose(report.build.reason, 300)})" if report.build.reason else ""), ""]
    environments = _environments(report)
    if environments:
        lines += ["Environments: " + "; ".join(f"{side} {md.code(env.commit[:12])}: {_environment(env)}"
                                               for side, env in environments), ""]
    for note in plan.notes:
        lines.append(f"> {md.prose(note)}")
    if plan.notes:
        lines.append("")  # a heading right after a quote would read as part of it
    by_verdict = defaultdict(list)
    for v in report.results:
        by_verdict[v.verdict].append(v)
    if by_verdict["new"]:
        lines += [f"{h} New failures caused by this change", ""]
        groups = by_root(by_verdict["new"])
        lines += _one_place(groups)
        for group in groups:
            lines += _section(group, h)
    refused = [v for v in by_verdict["environment"] if v.failure and v.failure.rule == "refused"]
    if refused:  # the change's own tree, never "not the change's fault"
        lines += [f"{h} Refused: nothing of this change was run", ""]
        lines += [f"- {md.code(v.primary_line.strip(), 300)}: {md.prose(v.failure.explanation, 300)}"
                  for v in refused] + [""]
    environment = [v for v in by_verdict["environment"] if v not in refused]
    if environment:
        lines += [f"{h} Environment failures (not the change's fault)", ""]
        lines += [f"- {md.code(v.test)} ({md.text(v.target, 60)}): "
                  + (f"{md.prose(v.failure.title, 160)}: " if v.failure and v.failure.title else "")
                  + f"{md.code(v.primary_line.strip(), 200)} ({md.code(v.category, 60)})" for v in environment] + [""]
    if by_verdict["ignored"]:
        lines += [f"{h} Ignored by a maintainer (not counted)", ""]
        lines += [f"- {md.code(v.test)} ({md.text(v.target, 60)}): {md.code(v.primary_line.strip(), 160)} "
                  f"— *{md.text(v.ignored_reason, 500)}*" for v in by_verdict["ignored"]] + [""]
    for verdict, title in (("pre_existing", "Pre-existing failures (also fail at the merge base)"),
                           ("flaky", "Flaky (failed, then passed on retry)"),
                           ("not_in_log", "Real error not in the log (only a wrapper's exit line)"),
                           ("fixed", "Fixed by this change")):
        if by_verdict[verdict]:
            lines += [f"{h} {title}", ""]
            lines += [f"- {md.code(v.test)} ({md.text(v.target, 60)})"
                      + (f": {md.code(v.primary_line.strip(), 160)}" if v.primary_line else "")
                      for v in by_verdict[verdict]] + [""]
    lines += matrix(report, h)
    lines += _misses(plan, h)
    not_run = [s for s in report.suites if s.status == "not_run"]
    if not_run:
        lines += [f"{h} Not run", ""] + _not_run(not_run) + [""]
    ran = [s for s in report.suites if s.status != "not_run"]
    if ran:
        lines += ["<details><summary>What ran</summary>", ""]
        lines += [f"- {md.text(s.suite, 80)} on {md.text(s.target, 80)}: {md.text(s.status, 40)}"
                  + (f" ({md.prose(s.reason, 500)})" if s.status == "crashed" else "")
                  + f", {len(s.tests)} test(s), {s.seconds:.0f}s" for s in ran]
        if report.base_runs:
            lines += ["", "At the merge base:"] + [_base_line(b) for b in report.base_runs]
        if plan.selected:
            estimate = sum(t.estimated_seconds for t in plan.selected)
            lines += ["", f"Selected tests (~{estimate:.0f}s estimated, budget {plan.budget_seconds:.0f}s):"]
            lines += [f"- {md.code(t.path)}: {md.prose(t.reason, 300)}" for t in plan.selected]
        lines += ["", "</details>", ""]
    lines.append(f"<sub>triage took {report.seconds:.0f}s"
                 + (" (merge-base results from cache)" if report.base_cached else "") + "</sub>")
    return "\n".join(lines) + "\n"


# ---- the PR comment's section: one screen, every failure numbered and linked to its evidence ----
# The whole report stays `to_markdown` (the CLI's, the check run's text); the comment says per
# root cause what, where, how to reproduce and where the evidence is, and `/etriage explain N`
# the rest (bot.commands: the engine's decision, looks-like, trunk history, every suspect).
ARTEFACT_LIMIT = 20000
OTHER_TITLES = (("environment", "Environment failures (not the change's fault)"),
                ("ignored", "Ignored by a maintainer (not counted)"),
                ("pre_existing", "Pre-existing failures (also fail at the merge base)"),
                ("flaky", "Flaky (failed, then passed on retry)"),
                ("not_in_log", "Real error not in the log (only a wrapper's exit line)"))


def entry_of(group: list[Verdict], kind: str, **where) -> Entry:
    """One root cause's Entry (bot.evidence): what `explain` says beyond the comment."""
    first, failure = group[0], group[0].failure or Failure(line="", line_no=0)
    tests = [f"{v.suite}: {v.test}" if kind == "ci" and v.test else v.suite if kind == "ci" else v.test
             for v in group]
    return Entry(kind=kind, verdict=first.verdict, title=failure.title or failure.category, category=first.category,
                 tests=list(dict.fromkeys(tests))[:20], fingerprints=sorted({v.fingerprint for v in group if v.fingerprint}),
                 primary_line=failure.line.strip()[:2000], decided_by=failure.decided_by or failure.rule,
                 confidence=failure.confidence, decision=list(failure.decision[:12]),
                 looks_like=[dict(n) for n in failure.looks_like[:3]], unsure=list(failure.unsure),
                 suspects=[{"path": s.path, "line": s.line, "symbol": s.symbol, "reason": s.reason, "score": s.score}
                           for s in first.suspects[:8]],
                 explanation=failure.explanation[:2000], suggestion=failure.suggestion[:1000],
                 **({"reproduce": first.reproduce[:2000]} | where))


def _artefact(report: Report, group: list[Verdict]) -> str:
    """The failure's own output: its log excerpt and each failing test's text, bounded."""
    texts = {(t.suite, t.target, t.test): t.text or t.message for s in report.suites for t in s.tests}
    parts = [group[0].log_excerpt.strip()] if group[0].log_excerpt.strip() else []
    for v in group:
        text = texts.get((v.suite, v.target, v.test), "")
        if text.strip():
            parts.append(f"==== {v.test} ({v.target}) ====\n{text.strip()}")
    return "\n\n".join(parts)[:ARTEFACT_LIMIT]


def _probe_of(verdict: Verdict) -> tuple[str, str] | None:
    """(probe suite, probe) of a probe's verdict ("multi_method::per_method_partitioners")."""
    suite, sep, probe = verdict.test.partition("::")
    if not sep or "::" in probe or not (suite in standalone.SUITES and "probes" in verdict.suite):
        return None
    return suite, probe


def _where(report: Report, group: list[Verdict], links: Links) -> dict:
    """The evidence's addresses and the reproduce line of one root cause of the bot's run."""
    first = group[0]
    where = {"link": links.artefact(report.head, first.fingerprint) if first.fingerprint else "",
             "artefact": _artefact(report, group)}
    probe = _probe_of(first)
    if probe:
        try:
            script = standalone.script(*probe)
        except standalone.UnknownProbe:
            return where
        where.update(script=script, script_name=standalone.file_name(*probe), reproduce=standalone.command(*probe),
                     script_url=links.script(report.head, *probe))
    return where


def _reproduce(entry: Entry) -> str:
    if entry.script_url:
        return (f"- Reproduce: [{md.code(entry.script_name, 120)}]({entry.script_url}), a standalone script: "
                f"{md.code('python ' + entry.script_name, 160)} where your ExecuTorch imports (exit 1: it reproduces)")
    if entry.script:  # a probe, and no public URL to serve its script from
        return (f"- Reproduce: {md.code(entry.reproduce, 160)} (the bot's web app serves the script; "
                "it has no public URL configured)")
    return f"- Reproduce: {md.code(entry.reproduce, 300)}" if entry.reproduce else ""


def _numbered_new(group: list[Verdict], entry: Entry) -> list[str]:
    first = group[0]
    failure = first.failure or Failure(line="", line_no=0)
    how = (f" ({md.code(failure.decided_by or failure.rule, 60)}, {failure.confidence:.2f})"
           if failure.decided_by or failure.rule else "")
    evidence = f" · [evidence]({entry.link})" if entry.link else ""
    lines = [f"**{NUMBER}.** {md.text(entry.title, 120)} · {first.category_words}{how} · "
             f"{md.text(spread(group), 80)}{evidence}",
             f"- {md.code(first.primary_line.strip(), 240)}"]
    if said := raised(failure):  # the line is the test's section header: what it raised, beside it
        lines.append(f"- Raised: {md.code(said, 240)}")
    tests = list(dict.fromkeys(f"{md.code(v.test, 120)} ({md.text(v.target, 40)})" for v in group))
    lines.append("- Tests: " + ", ".join(tests[:3]) + (f" and {len(tests) - 3} more" if len(tests) > 3 else ""))
    if first.suspects:
        lines.append("- Where to look: " + "; ".join(
            md.code(s.path + (f":{s.line}" if s.line else ""), 160) + (f" {md.code(s.symbol, 80)}" if s.symbol else "")
            for s in first.suspects[:2]))
    reproduce = _reproduce(entry)
    return lines + ([reproduce] if reproduce else []) + [""]


def _numbered_other(group: list[Verdict], entry: Entry) -> str:
    first = group[0]
    evidence = f" · [evidence]({entry.link})" if entry.link else ""
    why = f" — *{md.text(first.ignored_reason, 300)}*" if first.verdict == "ignored" else ""
    more = f" and {len(group) - 1} more" if len(group) > 1 else ""
    return (f"- **{NUMBER}.** {md.code(first.test, 160)} ({md.text(first.target, 40)}){more}: "
            f"{md.code(first.primary_line.strip(), 160)} ({first.category_words}){why}{evidence}")


def comment_section(report: Report, *, section_title: str, links: Links = NO_LINKS) -> tuple[str, list[Entry]]:
    """The report as the PR comment's `### <section_title>` section, and its numbered entries
    (bot.evidence: each starts with NUMBER, made 1., 2., ... across the comment)."""
    plan, h = report.plan, "####"
    page = links.pr_page()
    lines = [f"### {section_title}",
             f"{md.code(f'{report.merge_base[:12]}..{report.head[:12]}')}, {len(plan.changed_files)} changed file(s); "
             f"areas: {md.text(', '.join(plan.areas) or '-')}; build: {md.text(report.build.status, 40)}"
             + (f" ({md.prose(report.build.reason, 300)})" if report.build.reason else "")
             + (f" · [dashboard]({page})" if page else ""), ""]
    entries: list[Entry] = []
    by_verdict = defaultdict(list)
    for v in report.results:
        if v.failure is not None or v.verdict != "fixed":
            by_verdict[v.verdict].append(v)
    refused = [v for v in by_verdict["environment"] if v.failure and v.failure.rule == "refused"]
    if refused:  # the change's own tree, never "not the change's fault"
        lines += [f"{h} Refused: nothing of this change was run", ""]
        lines += [f"- {md.code(v.primary_line.strip(), 300)}: {md.prose(v.failure.explanation, 300)}"
                  for v in refused] + [""]
    if by_verdict["new"]:
        lines += [f"{h} New failures caused by this change", ""]
        groups = by_root(by_verdict["new"])
        lines += _one_place(groups)
        for group in groups:
            entries.append(entry_of(group, "pr", **_where(report, group, links)))
            lines += _numbered_new(group, entries[-1])
    by_verdict["environment"] = [v for v in by_verdict["environment"] if v not in refused]
    for verdict, title in OTHER_TITLES:
        if by_verdict[verdict]:
            lines += [f"{h} {title}", ""]
            for group in by_root(by_verdict[verdict]):
                entries.append(entry_of(group, "pr", **_where(report, group, links)))
                lines.append(_numbered_other(group, entries[-1]))
            lines.append("")
    fixed = [v for v in report.results if v.verdict == "fixed"]
    if fixed:
        lines += [f"Fixed by this change: " + ", ".join(md.code(v.test, 120) for v in fixed[:5])
                  + (f" and {len(fixed) - 5} more" if len(fixed) > 5 else ""), ""]
    lines += matrix(report, h)
    not_run = [s for s in report.suites if s.status == "not_run"]
    lines += _not_run(not_run) + ([""] if not_run else [])
    if plan.left_out:
        lines += [f"{len(plan.left_out)} relevant test file(s) not run (budget {plan.budget_seconds:.0f}s): "
                  "`/etriage run selected --all` runs every one that can run here.", ""]
    lines += _what_ran(report, h)
    return "\n".join(lines).rstrip() + "\n", entries


def _what_ran(report: Report, h: str) -> list[str]:
    """One folded block: notes, environments, suites run, the merge base, the selected tests."""
    ran = [s for s in report.suites if s.status != "not_run"]
    if not (ran or report.plan.notes):
        return []
    tests = sum(len(s.tests) for s in ran)
    lines = [f"<details><summary>What ran: {len(ran)} suite run(s), {tests} test(s)</summary>", ""]
    lines += [f"> {md.prose(note)}" for note in report.plan.notes] + ([""] if report.plan.notes else [])
    lines += [f"- {md.text(s.suite, 80)} on {md.text(s.target, 80)}: {md.text(s.status, 40)}"
              + (f" ({md.prose(s.reason, 300)})" if s.status == "crashed" else "")
              + f", {len(s.tests)} test(s), {s.seconds:.0f}s" for s in ran]
    lines += [f"- {side} {md.code(env.commit[:12])}: {_environment(env)}" for side, env in _environments(report)]
    lines += ["- at the merge base: " + _base_line(b).removeprefix("- ") for b in report.base_runs]
    lines += [f"- selected {md.code(t.path)}: {md.prose(t.reason, 200)}" for t in report.plan.selected[:5]]
    lines.append(f"- triage took {report.seconds:.0f}s" + (" (merge-base results from cache)" if report.base_cached else ""))
    return lines + ["", "</details>"]
