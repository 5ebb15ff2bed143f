"""When two planned tensors share memory: the rule the memory-planning check of a mutated buffer
rests on (a buffer shares its bytes with no other tensor of its method)."""
from __future__ import annotations

import pytest

from tasks.probes.graph_checks import Placement


@pytest.mark.parametrize(
    "a, b, overlap",
    [
        (Placement(2, 0, 192), Placement(2, 0, 192), True),  # the same place
        (Placement(2, 0, 192), Placement(2, 191, 8), True),  # last byte
        (Placement(2, 0, 192), Placement(2, 192, 192), False),  # adjacent
        (Placement(2, 64, 32), Placement(2, 0, 192), True),  # inside
        (Placement(1, 0, 192), Placement(2, 0, 192), False),  # another arena
        (Placement(None, None, 192), Placement(2, 0, 192), False),  # constant data is not planned
    ],
)
def test_overlap_is_symmetric_and_exclusive_at_the_end(a, b, overlap):
    assert a.overlaps(b) is overlap and b.overlaps(a) is overlap


def test_describe_says_where_or_that_it_is_not_planned():
    assert Placement(2, 192, 192).describe() == "mem_id 2 bytes [192, 384)"
    assert Placement(None, None, 192).describe() == "not memory planned"
