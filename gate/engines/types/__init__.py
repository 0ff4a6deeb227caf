"""The built-in engine types, one module each (gate/engines/registry.py): importing this package registers them all."""

from __future__ import annotations

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
