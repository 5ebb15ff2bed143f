"""The package ships copies of a few shared/ fixtures (so `etriage demo` runs anywhere); they
must stay byte-identical to the originals the tests read."""
from pathlib import Path

import pytest

PACKAGED = Path(__file__).resolve().parent.parent / "etriage" / "dev" / "fixtures"
COPIES = sorted(p for p in PACKAGED.rglob("*") if p.is_file() and p.relative_to(PACKAGED).parts[0] != "README.md")


def test_the_double_ships_every_rest_example(shared_dir):
    originals = {p.name for p in (shared_dir / "fixtures" / "github" / "rest").iterdir()}
    assert originals == {p.name for p in (PACKAGED / "github" / "rest").iterdir()}


@pytest.mark.parametrize("copy", COPIES, ids=lambda p: str(p.relative_to(PACKAGED)))
def test_packaged_copy_matches_its_original(copy, shared_dir):
    original = shared_dir / "fixtures" / copy.relative_to(PACKAGED)
    assert original.read_bytes() == copy.read_bytes()
