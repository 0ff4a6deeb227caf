"""The plug-in contract's torch-free half: the settings a plug-in receives, and how its callable is found.

It lives apart from :mod:`gate.engines.plugin` so that the worker process (:mod:`gate.engines.worker`) can load a
plug-in without importing torch or transformers: a plug-in that calls a service, or a C++ library, starts in a
fraction of a second, and one that needs torch imports it itself.  ``gate.engines.plugin`` re-exports these names.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, field
from importlib.metadata import entry_points

from gate.engines.base import Capabilities
from gate.errors import EngineError, Problem

ENTRY_POINT_GROUP = "specguard.engines"


@dataclass(frozen=True)
class PluginSettings:
    """Everything a plug-in needs to generate like the built-in engines."""

    max_new_tokens: list[int]  # per prompt
    seeds: list[int]  # per prompt, for sampling
    temperature: float  # 0.0 means greedy
    num_draft_tokens: int
    eos_token_ids: list[int]
    target: str  # local path or hub id of the target model
    draft: str
    dtype: str  # the target's dtype as in the config: auto, float32, bfloat16, float16
    device: str
    draft_dtype: str = "float32"  # the draft's dtype as in the config
    extra: dict = field(default_factory=dict)  # engines[].extra from the config, passed through unchanged
    # sampling's truncation (generation.sampling; 0 / 1.0 / 0.0: off), applied after the temperature in ``order``
    # ("vllm": min_p, top_k, top_p; "transformers": top_k, top_p, min_p), as gate.engines.sampling.truncate does
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    order: str = "vllm"

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def load_callable(spec: str, source: str = "config"):
    """Resolve 'package.module:function' or 'entrypoint:NAME' to a callable."""
    where = dict(source=source, field="engines[].callable")
    if spec.startswith("entrypoint:"):
        name = spec.split(":", 1)[1]
        found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
        if not found:
            raise EngineError(Problem(message=f"no entry point {name!r} in group {ENTRY_POINT_GROUP!r}",
                                      hint="install the package that provides it", **where))
        fn = found[0].load()
    else:
        module_name, _, attr = spec.partition(":")
        try:
            obj = importlib.import_module(module_name)
        except ImportError as exc:
            raise EngineError(Problem(message=f"cannot import {module_name!r}: {exc}",
                                      hint="is the module on PYTHONPATH or installed?", **where)) from None
        try:
            for part in attr.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            raise EngineError(Problem(message=f"module {module_name!r} has no attribute {attr!r}", **where)) from None
        fn = obj
    if not callable(fn):
        raise EngineError(Problem(message=f"{spec!r} is not callable", **where))
    try:
        signature = inspect.signature(fn)
        signature.bind([], 1, None)
    except TypeError:
        raise EngineError(Problem(message=f"{spec!r} takes {signature}; expected (prompt_ids, batch_size, settings)",
                                  hint="see docs/engines.md for the contract", **where)) from None
    except ValueError:
        pass  # no introspectable signature (a builtin): trust it
    return fn


def capabilities_for(max_batch_size: int | None) -> Capabilities:
    """A plug-in's capabilities, known from its config before it loads.  Not steppable: the gate cannot time a
    plug-in's draft and target steps, so the Leviathan expectation is "not measured" for it rather than borrowed
    from the loaded pair."""
    return Capabilities(max_batch_size=max_batch_size, steppable=False,
                        batch_limit_reason=f"engines[].max_batch_size is {max_batch_size}" if max_batch_size else None)
