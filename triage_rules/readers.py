"""Reading logs: decoding, block streaming and per-line normalisation.

A GitHub Actions log prefixes every line with an ISO timestamp and keeps the ANSI colour
codes of the tools it ran; the engine strips both before it looks at a line, but keeps line
numbers of the original input.
"""
from __future__ import annotations

import io
import os
import re
from collections.abc import Iterator

BLOCK_SIZE = 1 << 22  # 4 MiB of text per block: big enough for C-speed scans, small for memory
BINARY_SNIFF = 8192

TIMESTAMP_RE = re.compile(r"^\ufeff?\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z ?")
ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
GHA_COMMAND_RE = re.compile(r"^##\[(\w[\w-]*)(?:[^\]]*)\]")
# What a launcher or a quoting reader puts before every line: torchrun's `[rank0]:` (and the
# older `[default0]:`), and a quote's `> ` (a log pasted into an issue or an email reply).
LINE_PREFIX_RE = re.compile(r"^(?:\[(?:rank|default)\d+\]:\s?|>(?: |$))")
# `ctest -V` puts the test's number before each line of its output (`2: [ RUN      ] X.Y`),
# which it prints before the test's verdict.
CTEST_PREFIX_RE = re.compile(r"^\d{1,4}: (?=\S)")


class LogReadError(Exception):
    """The input cannot be read as a log (missing, a directory, binary)."""


def clean_line(raw: str) -> str:
    """The line as a person would read it: no timestamp prefix, no ANSI codes, no trailing blanks.

    A carriage return inside a line is a progress bar redrawing itself; keep the last frame.
    """
    line = _unstamped(raw) if raw[:1].isdigit() or raw[:1] == "\ufeff" else raw
    if "\x1b" in line:
        line = ANSI_RE.sub("", line)
    if "\r" in line:
        frames = [part for part in line.split("\r") if part.strip()]
        line = frames[-1] if frames else ""
    if line[:1] in "[>" and line:
        line = LINE_PREFIX_RE.sub("", line, count=1)
    return line.rstrip()


def clean_lines(text: str) -> list[str]:
    """clean_line for every line of a text (the ANSI pass runs once over the whole text)."""
    if "\x1b" in text:
        text = ANSI_RE.sub("", text)
    if "\r" in text:
        return [clean_line(line) for line in text.split("\n")]
    if "[rank" in text or "[default" in text or "\n>" in text or text.startswith(">"):
        return [clean_line(line) for line in text.split("\n")]
    return [(_unstamped(line) if line[:1].isdigit() else line).rstrip() for line in text.split("\n")]


def _unstamped(line: str) -> str:
    """A line without its timestamp and without `ctest -V`'s test number."""
    line = TIMESTAMP_RE.sub("", line, count=1)
    return CTEST_PREFIX_RE.sub("", line, count=1) if line[:1].isdigit() else line


def gha_command(line: str) -> tuple[str | None, str]:
    """Split a cleaned line into its `##[command]` (error, warning, group...) and the rest."""
    match = GHA_COMMAND_RE.match(line)
    if not match:
        return None, line
    return match.group(1), line[match.end():]


def check_path(path: str | os.PathLike) -> None:
    if not os.path.exists(path):
        raise LogReadError(f"{path}: no such file")
    if os.path.isdir(path):
        raise LogReadError(f"{path}: is a directory, not a log")


def iter_text_blocks(stream: io.RawIOBase | io.BufferedIOBase, block_size: int = BLOCK_SIZE) -> Iterator[bytes]:
    """A binary stream as blocks of bytes, cut anywhere (the extractor finds line boundaries).

    The blocks stay bytes: the extractor decodes only the lines it examines (invalid UTF-8 is
    replaced there: a log with a stray byte is still a log). NUL bytes in the first block mean
    the input is not a log at all.
    """
    chunk = stream.read(block_size)
    if b"\x00" in chunk[:BINARY_SNIFF]:
        raise LogReadError("binary file, not a log")
    while chunk:
        yield chunk
        chunk = stream.read(block_size)


def iter_blocks_of_text(text: str, block_size: int = BLOCK_SIZE) -> Iterator[bytes]:
    """An in-memory log as line-aligned byte blocks (same shape as iter_text_blocks)."""
    data = text.encode("utf-8", "surrogatepass")
    start, n = 0, len(data)
    while start < n:
        end = min(n, start + block_size)
        if end < n:
            nl = data.rfind(b"\n", start, end)
            end = nl + 1 if nl >= start else (data.find(b"\n", end) + 1 or n)
        yield data[start:end]
        start = end
