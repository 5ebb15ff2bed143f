"""Context lines travel into PR comments: they must stay readable."""
from triage_rules import classify_text
from triage_rules.extract import CONTEXT_LINE_CHARS


def test_long_context_lines_are_clipped_but_primary_line_is_whole():
    command = "/usr/bin/c++ " + " ".join(f"-I/include/dir{i}" for i in range(500))
    error = "src/op_add.cpp:12:3: error: 'foo' was not declared in this scope"
    log = "\n".join(["[1/3] Building CXX object op_add.cpp.o", "FAILED: op_add.cpp.o", command, error, "ninja: build stopped"])
    failure = classify_text(log)[0]
    assert failure.line == error
    assert failure.category == "build_failure"
    assert any(line.startswith("/usr/bin/c++") for line in failure.context)
    assert all(len(line) <= CONTEXT_LINE_CHARS + 2 for line in failure.context)
