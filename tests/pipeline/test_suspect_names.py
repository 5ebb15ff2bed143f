"""Suspect names are what a person searches for in the file."""
from tasks.pipeline.suspects import _symbols

SOURCE = b'''
from functools import singledispatch

@singledispatch
def to_backend(args):
    pass

@to_backend.register
def _(edge_program, partitioner):
    return 1

class Lowered:
    def method(self):
        def _():
            return 2
        return _
'''


def test_singledispatch_overloads_are_named_after_their_function():
    names = [name for name, _first, _last in _symbols(SOURCE)]
    assert names == ["to_backend", "to_backend[overload@9]", "Lowered", "Lowered.method", "Lowered.method._"]
