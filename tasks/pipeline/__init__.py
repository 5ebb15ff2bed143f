"""The triage pipeline: plan -> rebuild -> run suites on targets -> classify -> compare -> report.

    plan.py      diff merge_base..head -> Plan (areas, backends, suites, targets, recipes)
    build.py     overlay (overlay.py) for Python changes, CMake recipes for native ones
    select.py    tests the change can affect (reverse import graph, focus words, budget)
    suites.py    suite definitions -> commands; JUnit XML -> TestResult
    targets.py   where suites run: host (ExecuTorch pybindings), qnn-htp-sim (needs QNN_SDK_ROOT)
    base.py      merge-base outcomes for head's failures only (per-test cache per merge base)
    durations.py learned test-file/test costs from JUnit (selection budget)
    pytest_plugin/etriage_pytest.py  in-run test filter (`only`) and selected-test time budget
    compare.py   verdicts: new / pre_existing / flaky / environment / fixed
    suspects.py  changed functions of the diff a failure points at
    report.py    markdown (the PR comment) and JSON
    run.py       triage(options, classify=..., progress=...) -> Report: the one entry point
    cli.py       `etriage triage`

Tables (areas, suites, recipes, targets) are YAML in triage_rules/tables/, loaded by tables.py.
"""
