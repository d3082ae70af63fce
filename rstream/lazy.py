"""Names a package exports but loads on first use: the Spark-bound ones, so ``import rstream`` and
everything that needs no Spark (the DSL, the broker, the processors and their tests) never load pyspark."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(package: str, names: Mapping[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``names`` maps an exported name to the module that
    defines it; the first use imports that module and keeps the value in ``namespace``."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
