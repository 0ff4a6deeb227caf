"""Serving stacks: one module each under ``gate/stacks/``, and this registry of them.

A stack (:class:`gate.stacks.base.Stack`) is everything the gate knows of one serving stack: its launch line's
flags and how speculation is read off them, its wire format, its names for the speculation methods, its truncation
order, what its reference can score and whether its chat route gives ids.  Config validation, the launch-line
checks, ``specguard changed``, the weights line and the HTTP engine ask the registry for ``engines[].http.preset``'s
stack and use what it says; nothing outside this package compares a preset's name (tests/test_serving_stacks.py).

Adding a stack is one module that subclasses :class:`~gate.stacks.base.Stack` and calls :func:`register`: in
``gate/stacks/`` for a built-in one (every module here is loaded with this package), or any module imported before
the config is read (tests/toy_stack.py).  docs/architecture.md, "Adding a serving stack", walks through one.
"""

from __future__ import annotations

import importlib
import pkgutil

from gate.stacks.base import Stack, find, get, names, orders, register, stacks

# The built-in stacks: importing each module registers it (the one import by name here, as gate.engines.types does)
for _module in sorted(pkgutil.iter_modules(__path__), key=lambda m: (m.name != "vllm", m.name)):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["Stack", "find", "get", "names", "orders", "register", "stacks"]
