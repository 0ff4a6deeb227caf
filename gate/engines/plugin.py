"""Gate an in-house engine: a Python callable named in the config.

The contract (``docs/engines.md`` has the full text and ``examples/`` a worked
example)::

    def generate(prompt_ids: list[list[int]], batch_size: int,
                 settings: gate.engines.plugin.PluginSettings) -> list[dict | SequenceResult]

``prompt_ids`` is one batch of exactly ``batch_size`` prompts (the load level
being measured).  Return one result per prompt, in order, each with at
least ``token_ids``.  Structural problems (wrong count, missing fields, wrong
types) fail with an error that names the engine and the field; behavioural
ones (too many tokens, text after EOS) are left for the checks to find.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, field
from importlib.metadata import entry_points

import torch

from gate.engines.base import BatchResult, Capabilities, GenerationSettings, Request, SequenceResult, SpecCounters
from gate.engines.tracking import check_requests
from gate.errors import EngineError, Problem
from gate.timing import Clock, peak_memory_bytes, reset_peak_memory

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


def _as_result(obj, i: int, label: str, settings: PluginSettings) -> SequenceResult:
    src = f"engine {label!r}"
    if isinstance(obj, SequenceResult):
        obj = obj.to_dict()
    if not isinstance(obj, dict):
        raise EngineError(Problem(src, f"expected a dict or SequenceResult, got {type(obj).__name__}",
                                  field=f"result[{i}]"))
    toks = obj.get("token_ids")
    if not isinstance(toks, (list, tuple)) or not all(isinstance(t, int) and t >= 0 for t in toks):
        raise EngineError(Problem(src, "expected a list of non-negative ints", field=f"result[{i}].token_ids"))
    stop = obj.get("stop_reason")
    if stop is None:
        stop = "eos" if toks and toks[-1] in settings.eos_token_ids else "max_tokens"
    if stop not in ("eos", "max_tokens"):
        raise EngineError(Problem(src, f"expected 'eos' or 'max_tokens', got {stop!r}",
                                  field=f"result[{i}].stop_reason"))
    counters = obj.get("counters")
    if counters is not None and not isinstance(counters, dict):
        raise EngineError(Problem(src, "expected a dict of speculation counters", field=f"result[{i}].counters"))
    num = {}
    for key in ("wall_s", "ttft_s", "per_token_s"):
        v = obj.get(key)
        if v is not None and not isinstance(v, (int, float)):
            raise EngineError(Problem(src, f"expected seconds as a number, got {v!r}", field=f"result[{i}].{key}"))
        num[key] = v
    return SequenceResult(list(toks), stop, wall_s=num["wall_s"] or 0.0, ttft_s=num["ttft_s"],
                          per_token_s=num["per_token_s"],
                          counters=SpecCounters.from_dict(counters) if counters else None)


class PluginEngine:
    speculative = True

    def __init__(self, name: str, fn, device: torch.device, base: PluginSettings,
                 max_batch_size: int | None = None):
        self.name = name
        self.fn = fn
        self.device = device
        self.base = base
        # Not steppable: the gate cannot time a plug-in's draft and target steps, so the
        # Leviathan expectation is "not measured" for it rather than borrowed from the loaded pair.
        self.capabilities = Capabilities(
            max_batch_size=max_batch_size,
            batch_limit_reason=f"engines[].max_batch_size is {max_batch_size}" if max_batch_size else None,
            steppable=False)

    def generate(self, requests: list[Request], settings: GenerationSettings) -> BatchResult:
        check_requests(requests)
        plug = PluginSettings(
            max_new_tokens=[r.max_new_tokens for r in requests], seeds=[r.seed for r in requests],
            temperature=settings.temperature, num_draft_tokens=settings.num_draft_tokens,
            eos_token_ids=list(settings.eos_token_ids), target=self.base.target, draft=self.base.draft,
            dtype=self.base.dtype, device=self.base.device, draft_dtype=self.base.draft_dtype,
            extra=dict(self.base.extra),
        )
        clock = Clock(self.device)
        reset_peak_memory(self.device)
        start = clock.now()
        out = self.fn([list(r.prompt_ids) for r in requests], len(requests), plug)
        wall = clock.now() - start
        if not isinstance(out, (list, tuple)) or len(out) != len(requests):
            got = len(out) if isinstance(out, (list, tuple)) else type(out).__name__
            raise EngineError(Problem(f"engine {self.name!r}", f"expected {len(requests)} results, got {got}",
                                      field="return value", hint="return one result per prompt, in order"))
        seqs = [_as_result(o, i, self.name, plug) for i, o in enumerate(out)]
        for s in seqs:
            if not s.wall_s:
                s.wall_s = wall
        return BatchResult(seqs, wall_s=wall, peak_memory_bytes=peak_memory_bytes(self.device))
