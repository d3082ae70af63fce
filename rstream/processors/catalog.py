"""Declares every built-in operator: imports each module of ``rstream.processors``, and each module
registers the specs it declares next to its processors. A new operator is one new module here; no
list elsewhere names it."""

from __future__ import annotations

import importlib
import pkgutil

import rstream.processors as _package

for _info in pkgutil.iter_modules(_package.__path__):
    if _info.name != "catalog":
        importlib.import_module(f"{_package.__name__}.{_info.name}")
