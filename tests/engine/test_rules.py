"""Rule files: load-time validation (with file:line), matching, and the shipped rule set."""
from __future__ import annotations

from pathlib import Path

import pytest

from triage_rules import CATEGORIES, classify_text, engine
from triage_rules.rules import (RULES_DIR, RuleError, Subject, default_rules, load_rules, match_rules,
                                owners_table, parse_rules)

GOOD = """\
rules:
  - id: good-rule
    category: lint
    title: A lint rule
    priority: 5
    match:
      line: 'lint (?P<what>\\w+)'
    explanation: "found {what}"
"""


@pytest.mark.parametrize(
    "text,error",
    [
        (GOOD.replace("    priority: 5\n", "    priority: 5\n    colour: red\n"), "rule.yaml:6: unknown key 'colour'"),
        (GOOD.replace("'lint (?P<what>\\w+)'", "'lint (unclosed'"), "rule.yaml:7: bad regex for 'line' in rule 'good-rule'"),
        (GOOD.replace("category: lint", "category: lints"), "rule.yaml:3: unknown category 'lints'"),
        (GOOD.replace("      line:", "      lines:"), "rule.yaml:7: unknown matcher 'lines'"),
        (GOOD.replace("    title: A lint rule\n", ""), "rule.yaml:2: rule 'good-rule' lacks title"),
        (GOOD.replace("priority: 5", "priority: high"), "rule.yaml:5: priority of 'good-rule' must be an integer"),
        (GOOD.replace('category: lint', 'category: "{nope}"'), "rule.yaml:3: category '{nope}' of 'good-rule' names no capture group"),
        (GOOD + "  - id: x\n   bad: [", "rule.yaml"),
        ("rules: {}\n", "rule.yaml:1: 'rules' must be a list"),
        (GOOD.replace("    priority: 5\n", "    priority: 5\n    priority: 6\n"), "rule.yaml:6: duplicate key 'priority' in rule 'good-rule'"),
        # typos get a did-you-mean; wrong types, values and empty text say what is wanted
        (GOOD.replace("    title:", "    titel:"), "rule.yaml:4: unknown key 'titel' in rule 'good-rule' (did you mean 'title'?)"),
        (GOOD.replace("      line:", "      primery:"), "rule.yaml:7: unknown matcher 'primery' in rule 'good-rule' (did you mean 'primary'?)"),
        (GOOD.replace("category: lint", "category: lnit"), "rule.yaml:3: unknown category 'lnit' (did you mean 'lint'?) in rule 'good-rule'"),
        (GOOD.replace("    priority: 5\n", "    priority: 5\n    environment: yes please\n"), "rule.yaml:6: environment of 'good-rule' must be true or false"),
        (GOOD.replace("    priority: 5\n", "    priority: 5\n    strength: strongest\n"), "rule.yaml:6: strength of 'good-rule' 'strongest' is not one of strong, weak, certain (did you mean 'strong'?)"),
        (GOOD.replace("    priority: 5\n", "    priority: 5\n    owners: [runtime]\n"), "rule.yaml:6: owners[0] of 'good-rule' 'runtime' is not an @handle or a /path/"),
        (GOOD.replace("priority: 5", "priority: 5.5"), "rule.yaml:5: priority of 'good-rule' must be an integer"),
        (GOOD.replace("title: A lint rule", "title: '  '"), "rule.yaml:4: title of 'good-rule' must be non-empty text"),
        (GOOD.replace("id: good-rule", "id: Good Rule"), "rule.yaml:2: rule id 'Good Rule' is not lowercase letters, digits, - _ ."),
        (GOOD.replace("      line: 'lint (?P<what>\\w+)'\n", "      line: ''\n"), "rule.yaml:7: matcher 'line' of 'good-rule' must be a regex string"),
        (GOOD.replace("      line: 'lint (?P<what>\\w+)'\n", "      line: 5\n"), "rule.yaml:7: matcher 'line' of 'good-rule' must be a regex string"),
        (GOOD.replace("    match:\n      line: 'lint (?P<what>\\w+)'\n", "    match: {}\n"), "rule.yaml:6: match of 'good-rule' must not be empty"),
        (GOOD.replace("    title: A lint rule\n    priority: 5\n", ""), "rule.yaml:2: rule 'good-rule' lacks priority, title"),
        (GOOD.replace("rules:", "rule:"), "rule.yaml:1: top level: unknown key 'rule' (did you mean 'rules'?)"),
        ("rules:\n  - just text\n", "rule.yaml:2: each rule must be a mapping"),
        (GOOD.replace("priority: 5", "priority: !!python/object/apply:os.getpid []"), "rule.yaml:5: priority of 'good-rule' must be an integer"),
    ],
    ids=["unknown-key", "bad-regex", "bad-category", "unknown-matcher", "missing-title", "bad-priority",
         "category-template", "invalid-yaml", "rules-not-list", "duplicate-key", "typo-key", "typo-matcher",
         "typo-category", "wrong-type-bool", "bad-strength", "bad-owner", "float-priority", "blank-title", "bad-id",
         "empty-regex", "regex-not-text", "empty-match", "missing-two", "top-level-typo", "rule-not-mapping",
         "python-tag"],
)
def test_invalid_rule_files_are_rejected_with_file_and_line(text, error):
    with pytest.raises(RuleError) as caught:
        parse_rules(text, "rule.yaml")
    assert error in str(caught.value)


def test_duplicate_ids_across_files_are_rejected(tmp_path):
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "b.yaml").write_text("\n\n" + GOOD)
    with pytest.raises(RuleError, match=r"b\.yaml:4: duplicate rule id 'good-rule' \(first defined at .*a\.yaml:2\)"):
        load_rules(tmp_path)


def test_captures_fill_the_explanation_and_priority_orders_rules(tmp_path):
    low = GOOD.replace("good-rule", "low-rule").replace("priority: 5", "priority: 1").replace("found {what}", "low")
    (tmp_path / "a.yaml").write_text(low + GOOD.split("rules:\n", 1)[1])
    rules = load_rules(tmp_path)
    assert [r.id for r in rules] == ["good-rule", "low-rule"]
    found = match_rules(rules, Subject(primary="x", lines=("lint error here",)))
    assert found.rule.id == "good-rule" and found.captures == {"what": "error"}


def test_shipped_rule_set_is_large_valid_and_cached():
    rules = default_rules()
    assert len(rules) >= 60
    assert default_rules() is rules  # compiled once per process
    assert default_rules(RULES_DIR) is rules and default_rules(Path(str(RULES_DIR))) is rules  # however it is named
    assert {r.category for r in rules if not r.category.startswith("{")} <= set(CATEGORIES)
    for category in CATEGORIES:
        assert any(r.category == category for r in rules) or category in ("multi_method_lowering", "mutable_buffer")


@pytest.mark.parametrize(
    "line,category,environment",
    [
        ("Failed to set up QNN SDK. Please check QNN_SDK_ROOT.", "qnn_sdk_or_toolchain", True),
        ("E 00:00:00.012345 executorch:method.cpp:85] Backend QnnBackend is not registered.", "runtime_error", True),
        ("adb: error: device offline", "device_infra", True),
        ("error: device unauthorized.", "device_infra", True),
        ("adb command failed", "device_infra", True),
        ("ModuleNotFoundError: No module named 'executorch.backends.qualcomm.python.PyQnnManagerAdaptor'", "qnn_sdk_or_toolchain", True),
        ("ModuleNotFoundError: No module named 'yaml'", "import_or_env", False),
        ("RuntimeError: Failed to execute method forward, error: 0x14", "runtime_error", False),
        ("AssertionError: Tensor-likes are not close!", "numerical_mismatch", False),
        ("CMake Error at backends/qualcomm/CMakeLists.txt:12 (message):", "build_failure", False),
        ("runtime/executor/method.cpp:120:5: error: use of undeclared identifier 'x'", "build_failure", False),
        ("No space left on device", "ci_infra", True),
        ("##[error]The operation was canceled.", "ci_infra", True),
        ("torch._dynamo.exc.Unsupported: call_function args: UserDefinedObjectVariable(EasyDict)", "export_failure", False),
        ("torch.fx.experimental.symbolic_shapes.GuardOnDataDependentSymNode: Could not guard on data-dependent expression", "export_failure", False),
        ("executorch.exir.verification.verifier.SpecViolationError: Operator torch._ops.aten.foo.default is not Aten Canonical.", "export_failure", False),
        ("ValueError: buffers_to_mutate is empty after convert_pt2e", "mutable_buffer", False),
        ("AssertionError: k_cache became a frozen constant _frozen_param0 after convert_pt2e", "mutable_buffer", False),
        ("RuntimeError: index_put_ on the kv cache is not supported by the partitioner", "mutable_buffer", False),
        ("RuntimeError: node aten_sin_default is used by multiple delegates (shared by several partitions)", "multi_method_lowering", False),
        ("RuntimeError: getitem node getitem_1 is dangling after lowering", "multi_method_lowering", False),
        ("[ERROR] [Qnn ExecuTorch]: Failed to finalize Qnn Graph with error: 1002", "qnn_op_validation", False),
        ("Segmentation fault (core dumped)", "runtime_error", False),
    ],
)
def test_rules_put_real_failure_lines_in_the_right_category(line, category, environment):
    first = classify_text(f"2026-08-01T10:00:00.0000000Z {line}\n")[0]
    assert (first.category, first.environment) == (category, environment), first.rule
    assert first.title and first.explanation


def test_no_rule_match_still_explains(tmp_path):
    first = classify_text("some tool: fatal: the frobnicator exploded\n")[0]
    assert first.category in CATEGORIES and first.explanation and first.title


def test_job_name_matcher():
    first = classify_text("Process exploded somewhere. error: nope\n", job_name="Lint / lintrunner")
    assert first[0].category == "lint"


@pytest.mark.parametrize("text, error", [
    ('owners:\n  /a/: ["@x"]\n  /b/: [y]\n', r"owners\.yaml:3: owners\./b/\[0\]: 'y' is not an @handle"),
    ('owners:\n  a/: ["@x"]\n', r"owners\.yaml:2: owners\.a/: 'a/' is not a /path/"),
    ('owner:\n  /a/: ["@x"]\n', r"owners\.yaml:1: top level: unknown key 'owner' \(did you mean 'owners'\?\)"),
])
def test_owners_file_mistakes_name_the_line(tmp_path, text, error):
    path = tmp_path / "owners.yaml"
    path.write_text(text)
    with pytest.raises(RuleError, match=error):
        owners_table.__wrapped__(path)  # the uncached reader: the shipped table stays cached


def test_a_merge_conflict_is_the_change_against_its_base_not_the_environment():
    log = ("Auto-merging backends/qualcomm/builders/op_linear.py\n"
           "CONFLICT (content): Merge conflict in backends/qualcomm/builders/op_linear.py\n"
           "Automatic merge failed; fix conflicts and then commit the result.\n"
           "##[error]Process completed with exit code 1.\n")
    first = read_by_rules(log)
    assert (first.rule, first.category, first.environment) == ("ci-merge-conflict", "other", False)
    assert "Rebase" in first.suggestion and "re-run" not in first.explanation.lower()
    rebase = read_by_rules("error: could not apply 3f2a9c1... [QNN] add op_linear\nhint: Resolve all conflicts manually\n")
    assert (rebase.rule, rebase.environment) == ("ci-merge-conflict", False)


def read_by_rules(log: str):
    """The rules' reading of a failed job's log (no model): what a class rule is tested on."""
    return engine.classify_text(log, failed=True, use_model=False)[0]


@pytest.mark.parametrize(
    "log, rule, category",
    [
        # a linter's own output format, whatever the tool
        ("./docs/source/tutorial.md:12: recieve ==> receive\n", "lint-tool-output", "lint"),
        ("exir/passes/foo.py:3:0: C0114: Missing module docstring (missing-module-docstring)\n", "lint-type-checker", "lint"),
        ("  12:3      error    wrong indentation: expected 4 but found 2  (indentation)\n", "lint-tool-output", "lint"),
        ("runtime/core/evalue.cpp:41:7: warning: variable 'x' is not initialized [cppcoreguidelines-init-variables]\n",
         "lint-tool-output", "lint"),
        ("ERROR: /src/exir/capture/_config.py Imports are incorrectly sorted and/or formatted.\n", "lint-tool-output", "lint"),
        # a model's answer that degenerates, or NaN outputs
        ('generated: "the cat the cat the cat the cat the cat the cat"\n', "numeric-degenerate-output", "numerical_mismatch"),
        ("Output: okokokokokokokokokokokok\n", "numeric-degenerate-output", "numerical_mismatch"),
        ("logits[0] = nan\n", "numeric-nan-output", "numerical_mismatch"),
        ("output SQNR 3.1 dB is below the 20 dB threshold\n", "numeric-accuracy", "numerical_mismatch"),
        # the QNN SDK: a context binary of another SDK, a build without the SDK's headers
        ("[ERROR] [Qnn ExecuTorch]: Failed to interpret QNN context binary. Error code 30010.\n",
         "qnn-context-binary", "qnn_sdk_or_toolchain"),
        ("backends/qualcomm/runtime/QnnManager.h:12:10: fatal error: 'QnnCommon.h' file not found\n",
         "qnn-sdk-build", "qnn_sdk_or_toolchain"),
        ("ops/hvx_add.c:88:12: error: call to undeclared function 'Q6_Vqf32_vadd_VsfVsf'\n",
         "qnn-sdk-build", "qnn_sdk_or_toolchain"),
        # any QNN frontend declining an operator
        ("[E:onnxruntime:, qnn_execution_provider.cc:714 GetCapability] Unsupported nodes in QNN EP: Gelu\n",
         "qnn-frontend-op-unsupported", "qnn_op_validation"),
        ("INFO: TfLiteQnnDelegate delegate: 0 nodes delegated out of 12 nodes with 0 partitions.\n",
         "qnn-frontend-op-unsupported", "qnn_op_validation"),
        # the verifier meeting a partition fused by to_backend, whatever its tag
        ("torch._export.verifier.SpecViolationError: call_module is not valid: got a class 'fused_decode_tag3'\n",
         "mm-original-program-validate", "multi_method_lowering"),
        # a delegate whose call does not match its signature; methods sharing what one owns
        ("(args.size() == num_inputs + num_outputs) is false! graph declares 1 inputs and 2 outputs\n",
         "mm-delegate-io-count", "multi_method_lowering"),
        ("Constant 'w0' in method 'prefill' is incompatible with the version shared by another method\n",
         "mm-delegate-io-count", "multi_method_lowering"),
        # the device's own failures: its system processes, its simulator, its lab
        ("F libc    : Fatal signal 11 (SIGSEGV), code 1 in tid 901 (surfaceflinger)\n", "device-system-crash", "device_infra"),
        ("qemu-system-aarch64: failed to initialize kvm: Permission denied\n", "device-simulator-start", "device_infra"),
        ("error: Could not start a new session. UiAutomator2 quit unexpectedly: instrumentation process crashed\n",
         "device-lab-session", "device_infra"),
        ("ImportError: cannot import name 'to_edge_x' from 'executorch.exir'\n", "env-import-name", "import_or_env"),
        # a KV cache without room for the request is a run-time limit, not lost state
        ("RuntimeError: not enough free blocks in the kv cache for 4096 tokens\n", "kv-cache-capacity", "runtime_error"),
        ("RuntimeError: k_cache is a constant after convert_pt2e\n", "mb-buffer-folded", "mutable_buffer"),
        ("AssertionError: update_cache wrote no k_cache slot for position 7\n", "mb-kv-cache", "mutable_buffer"),
        # a command called wrongly
        ("export_llama.py: error: unrecognized arguments: --qnn-htp\n", "command-usage", "other"),
        ("E       fixture 'tmp_model' not found\n", "command-usage", "other"),
    ],
)
def test_class_rules_read_other_members_of_their_class(log, rule, category):
    """Each class rule on a line of its class that is none of the corpus's records."""
    first = read_by_rules(log)
    assert (first.rule, first.category) == (rule, category), first.line


@pytest.mark.parametrize("line", [
    "ptr = 0xffffffffffffffff, tag deadbeefdeadbeefdeadbeefdeadbeef",  # hex digits repeat
    "FAILED FAILED FAILED FAILED FAILED FAILED",  # a status word, not an answer
    "==================== 3 failed, 12 passed ====================",
    "Loading nano model from ./nanogpt.pte",
])
def test_lines_that_only_look_repetitive_or_nan_are_not_numbers(line):
    first = read_by_rules(line + "\n")
    assert first.rule not in ("numeric-degenerate-output", "numeric-nan-output"), first.rule


def test_a_generic_reading_is_made_specific_by_the_lines_around_it_never_a_specific_one():
    """A bare exception says nothing of what broke; a line just above it may (QNN's own log). A
    specific reading of the failure itself is not second-guessed by its context."""
    log = ("[INFO] [Qnn ExecuTorch]: Using newer context binary on old SDK\n"
           "[INFO] [Qnn ExecuTorch]: Destroy Qnn backend\n"
           "RuntimeError: the runner stopped\n")
    first = read_by_rules(log)
    assert first.line.startswith("RuntimeError") and first.rule == "qnn-context-binary"
    specific = ("[INFO] [Qnn ExecuTorch]: Using newer context binary on old SDK\n"
                "AssertionError: Tensor-likes are not close!\n")
    first = read_by_rules(specific)
    assert (first.rule, first.category) == ("numeric-not-close", "numerical_mismatch")


@pytest.mark.parametrize("line", [
    "RuntimeError: Corstone-320 FVP run failed: output mismatch on tensor 0",  # the program's failure
    "qemu: uncaught target signal 11 (Segmentation fault) - core dumped",  # the program crashed
    "org.openqa.selenium.NoSuchElementException: no such element (Appium) Session ID: 1234",  # the app's
    # a compute device failing is the program's: a kernel's assertion, a GPU lost mid-run
    "RuntimeError: CUDA error: device-side assert triggered; the expected device was not found",
    "  what():  vk::Device::waitForFences: ErrorDeviceLost",
    "RuntimeError: XPU device lost while running the graph",
])
def test_what_fails_on_a_simulator_or_through_a_driver_is_not_the_devices(line):
    """Only the simulator or the lab failing by itself is an environment verdict: a program that
    fails or crashes on it, or a UI test's own failure reported by its driver, is the change's."""
    first = read_by_rules(line + "\n")
    assert first.category != "device_infra" and not first.environment, first.rule


def test_a_binary_is_a_qnn_context_binary_only_where_qnn_says_so():
    first = read_by_rules("codesign: Failed to validate binary signature of app.so\n")
    assert first.rule != "qnn-context-binary" and first.category != "qnn_sdk_or_toolchain"
    qnn = read_by_rules("QNN: Failed to validate binary: 1002\n")
    assert (qnn.rule, qnn.category) == ("qnn-context-binary", "qnn_sdk_or_toolchain")
