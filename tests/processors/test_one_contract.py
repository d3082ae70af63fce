"""No operator module imports another operator module: what several share lives in a neutral module
(``rstream/processors/timed.py``, ``base.py``, ``fold.py``), an aggregation over a window has its processor
made by the ``WINDOW`` spec, and the combine node writes through what the shuffle sink declares."""

from __future__ import annotations

import ast
from pathlib import Path

import rstream

PACKAGE = Path(rstream.__file__).parent


def _operator_modules() -> dict[str, Path]:
    """The modules that declare an operator (they ``register`` an ``OperatorSpec``), by module name."""
    found = {}
    for path in [*sorted((PACKAGE / "processors").glob("*.py")), *sorted((PACKAGE / "shuffle").glob("*.py"))]:
        text = path.read_text()
        if "register(OperatorSpec(" in text:
            found[f"rstream.{path.parent.name}.{path.stem}"] = path
    return found


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_no_operator_module_imports_another_operator_module() -> None:
    operators = _operator_modules()
    assert {"rstream.processors.window", "rstream.processors.aggregate", "rstream.processors.join",
            "rstream.processors.interval_join", "rstream.shuffle.combine", "rstream.shuffle.sink"} <= set(operators)
    offenders = sorted(f"{module} imports {other}" for module, path in operators.items()
                       for other in _imported(path) & set(operators) if other != module)
    assert not offenders, offenders
