"""The coverage map's tables (migration 0003): which test executes which lines of which file.

Keyed by the file's git blob id, not by commit: a file unchanged between two trunk commits
keeps its rows, and a file changed by a pull request is looked up by its merge-base blob.

    coverage_lines  (source_path, source_blob, test) -> lines ("3-7,12"), the test file's blob,
                    the commit it was measured at
    coverage_files  (commit, test_path) -> how building the map for that commit went for one
                    test file: done | carried (its blob and every blob it covers unchanged since
                    a commit where it was done) | failed | uncollectable, with its tests, CPU and
                    wall seconds, the blobs of the sources it covered, and the error
"""
from __future__ import annotations

from sqlalchemy import JSON, Column, DateTime, Float, Index, Integer, MetaData, String, Table, Text

TABLES = ("coverage_lines", "coverage_files")


def coverage_tables(metadata: MetaData, p: str = "") -> dict[str, Table]:
    if f"{p}coverage_lines" in metadata.tables:
        return {name: metadata.tables[f"{p}{name}"] for name in TABLES}
    return {
        "coverage_lines": Table(
            f"{p}coverage_lines", metadata,
            Column("source_path", String(500), primary_key=True),
            Column("source_blob", String(64), primary_key=True),
            Column("test", String(500), primary_key=True),
            Column("lines", Text, nullable=False), Column("test_blob", String(64)),
            Column("commit", String(64)), Column("at", DateTime(timezone=True)),
            Index(f"{p}ix_coverage_lines_test", "test")),
        "coverage_files": Table(
            f"{p}coverage_files", metadata,
            Column("commit", String(64), primary_key=True),
            Column("test_path", String(500), primary_key=True),
            Column("test_blob", String(64)), Column("status", String(20), nullable=False),
            Column("tests", Integer), Column("cpu_seconds", Float), Column("wall_seconds", Float),
            Column("sources", JSON), Column("error", Text), Column("at", DateTime(timezone=True))),
    }
