"""The workshop's core path, read from the notebooks themselves (no kernel): a learner who skips every
section marked *(optional)* (``tools/workshop_time.py`` says where they are) can still run every core
cell, the core exercises included, because no core cell uses a name that only an optional cell defines."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path
from typing import Any

import nbformat
import pytest

from tools.workshop_time import NOTEBOOKS, cells_by_part

pytestmark = pytest.mark.unit

NAMES = sorted(p.name for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def _defined(tree: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
    return out


def _used(tree: ast.AST) -> set[str]:
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}


def _parse(source: str) -> ast.AST:
    # IPython's own syntax (%magic, !shell) is not Python: such lines define nothing the test follows
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    return ast.parse("\n".join(lines))


def optional_names_used_by_core(notebook: Any) -> dict[int, set[str]]:
    """Per core code cell (its index among the learner's cells), the names it uses that only optional
    cells before it define (none may)."""
    core_defined: set[str] = set(dir(builtins))
    optional_only: set[str] = set()
    found = {}
    for index, (cell, optional) in enumerate(cells_by_part(notebook)):
        if cell["cell_type"] != "code":
            continue
        tree = _parse(cell["source"])
        defined = _defined(tree)
        if optional:
            optional_only |= defined - core_defined
            continue
        missing = (_used(tree) - defined - core_defined) & optional_only
        if missing:
            found[index] = missing
        core_defined |= defined
        optional_only -= defined
    return found


@pytest.mark.parametrize("name", NAMES)
def test_no_core_cell_needs_an_optional_one(name: str) -> None:
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    assert optional_names_used_by_core(notebook) == {}


def test_the_check_sees_a_core_cell_that_needs_an_optional_one() -> None:
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("a = 1"),
        nbformat.v4.new_markdown_cell("## More *(optional)*"),
        nbformat.v4.new_code_cell("b = a + 1\ndef f(x):\n    return x"),
        nbformat.v4.new_markdown_cell("## Back to the core"),
        nbformat.v4.new_code_cell("print(a, f(2))"),
        nbformat.v4.new_code_cell("b = 3\nprint(b)"),  # defines b itself: fine
    ])
    assert optional_names_used_by_core(nb) == {4: {"f"}}


def test_notebook_folder_is_where_the_tool_looks() -> None:
    assert Path(NOTEBOOKS, NAMES[0]).is_file() and len(NAMES) == 8
