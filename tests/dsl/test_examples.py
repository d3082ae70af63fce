"""Every public method of the DSL shows a short example in its docstring, and every example runs: a job
built and run in this process (``StreamBuilder.run_in_process``, no Spark), its sink's messages as the
docstring says (doctest)."""

from __future__ import annotations

import doctest
import inspect

import pytest

import rstream
import rstream.dsl.builder
import rstream.dsl.streams
from rstream.dsl.streams import (
    GroupedStream,
    JoinedStream,
    JoinResultStream,
    RStream,
    RTable,
    TableJoinedStream,
    WindowResultStream,
    WindowStream,
)

CLASSES = [rstream.StreamBuilder, RStream, GroupedStream, WindowStream, WindowResultStream, JoinedStream,
           JoinResultStream, RTable, TableJoinedStream]
#: Not DSL calls: what a notebook shows, and the builder's drawings.
NO_EXAMPLE = {"node", "logical_dot", "logical_graph"}


def _public_methods() -> list[tuple[str, object]]:
    out = []
    for cls in CLASSES:
        for name, member in vars(cls).items():
            if callable(member) and not name.startswith("_") and name not in NO_EXAMPLE:
                out.append((f"{cls.__name__}.{name}", member))
    out.append(("RStream.sink", RStream.sink))  # (defined on the base of every stream)
    return out


@pytest.mark.parametrize(("name", "method"), _public_methods(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_public_dsl_method_shows_an_example(name: str, method: object) -> None:
    assert ">>> " in (inspect.getdoc(method) or ""), f"{name} has no example in its docstring"


@pytest.mark.parametrize("module", [rstream.dsl.streams, rstream.dsl.builder], ids=lambda m: m.__name__)
def test_every_example_runs_and_shows_what_it_says(module: object) -> None:
    globs = {name: getattr(rstream, name) for name in rstream.__all__}
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = [t for t in finder.find(module, globs=globs) if t.examples]
    assert tests
    for test in tests:
        runner.run(test)
    results = runner.summarize(verbose=False)
    assert results.failed == 0, f"{results.failed} of {results.attempted} examples failed (doctest's report above)"
