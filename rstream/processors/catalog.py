"""Declares every built-in operator: imports each module of ``rstream.processors`` (and the shuffle's
nodes in ``rstream.shuffle``), and each module
registers the specs it declares next to its processors. A new operator is one new module here; no
list elsewhere names it."""

from __future__ import annotations

import importlib
import pkgutil

import rstream.processors as _package

for _info in pkgutil.iter_modules(_package.__path__):
    if _info.name != "catalog":
        importlib.import_module(f"{_package.__name__}.{_info.name}")
for _name in ("sink", "source", "combine"):  # the shuffle's own nodes, added by the second build
    importlib.import_module(f"rstream.shuffle.{_name}")
