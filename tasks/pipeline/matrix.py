"""The test x target matrix of a report: one row per test, one column per target, each cell the
test's verdict there (or its outcome when it passed, or why it did not run). Shown when a suite
ran on more than one target, e.g. `--target host --target ssh:lab-1 --target emulated-arm64`."""
from __future__ import annotations

from bot import md
from tasks.pipeline.compare import crash_test_name
from tasks.records import Report

CELLS = {"new": "❌ new", "pre_existing": "⚪ pre-existing", "flaky": "🔁 flaky", "environment": "🌩️ environment",
         "fixed": "✅ fixed", "ignored": "🙈 ignored", "passed": "✅", "failed": "❌ failed", "error": "❌ error",
         "skipped": "➖ skipped"}
ROWS_SHOWN = 40
WHOLE = "(whole suite)"  # the row of a suite that did not run, or crashed, before any test


def matrix(report: Report, h: str) -> list[str]:
    by_suite: dict[str, list] = {}
    for suite in report.suites:
        if suite.target != "-":
            by_suite.setdefault(suite.suite, []).append(suite)
    shown = {name: runs for name, runs in by_suite.items() if len({r.target for r in runs}) > 1}
    if not shown:
        return []
    targets = list(dict.fromkeys(r.target for runs in shown.values() for r in runs))
    verdicts = {(v.suite, v.target, v.test): v.verdict for v in report.results}
    rows: dict[tuple[str, str], dict[str, str]] = {}
    for name, runs in shown.items():
        for run in runs:
            for test in run.tests:
                cell = CELLS.get(verdicts.get((name, run.target, test.test)) or test.outcome, test.outcome)
                rows.setdefault((name, test.test), {})[run.target] = cell
        for run in runs:  # a whole suite that did not run, or crashed, on a target
            if run.status in ("not_run", "crashed"):
                crash = verdicts.get((name, run.target, crash_test_name(name)))
                cell = "— not run" if run.status == "not_run" else f"💥 crashed ({CELLS.get(crash, 'error')})"
                for key in [k for k in rows if k[0] == name] or [(name, WHOLE)]:
                    rows.setdefault(key, {})[run.target] = cell
    if all(cell == "— not run" for cells in rows.values() for cell in cells.values()):
        return []  # nothing ran anywhere: the report's "Not run" section says why, once
    header = [f"{md.cell_text(name, 60)}<br><sub>{md.cell_text(_device(report, name), 80)}</sub>"
              if _device(report, name) else md.cell_text(name, 60) for name in targets]
    ordered = sorted(rows.items(), key=lambda kv: (_rank(kv[1].values()), kv[0]))
    lines = [f"{h} Tests × targets", "", "| test | " + " | ".join(header) + " |",
             "|---|" + "---|" * len(targets)]
    for (suite, test), cells in ordered[:ROWS_SHOWN]:
        label = f"{suite} {WHOLE}" if test == WHOLE else test  # a suite with no test to show: named
        lines.append(f"| {md.cell(label)} | " + " | ".join(cells.get(t, "·") for t in targets) + " |")
    if len(ordered) > ROWS_SHOWN:
        lines.append(f"\n…and {len(ordered) - ROWS_SHOWN} more test(s), all in the JSON report.")
    return lines + ["", "`·`: not part of that target's run (device targets run the probes' programs).", ""]


def _rank(cells) -> int:
    """Failures first, then anything else that did not pass, then the passes."""
    cells = list(cells)
    if any(c.startswith("❌") for c in cells):
        return 0
    return 1 if any(c not in ("✅", "·") for c in cells) else 2


def _device(report: Report, target: str) -> str:
    """The device a device target ran on ("loop-1 (x86_64)"), from its suite result."""
    for suite in report.suites:
        if suite.target == target and suite.reason.startswith("on device "):
            return suite.reason.removeprefix("on device ").split(",")[0]
    return ""
