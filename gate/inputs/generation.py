"""``generation:``: what is generated (greedy, sampled) and how a sampled token is drawn, as it is served.

Sampling is the temperature and, where production truncates, ``top_k``, ``top_p`` and ``min_p``.  Each one keeps
a part of the target's tempered distribution and renormalises; ``truncation_order`` says in which order, because
the three do not commute when ``min_p`` meets the others (gate/engines/sampling.py, docs/checks.md):

* ``vllm`` (default): ``min_p`` against the tempered distribution, then ``top_k``, then ``top_p`` over what
  ``top_k`` kept, renormalised (vLLM V1's sampler; SGLang's ``top_k``/``top_p`` agree);
* ``transformers``: ``top_k``, ``top_p``, ``min_p``, each on the previous one's renormalised result (the warpers
  ``generate()`` builds);
* any other stack's name whose order the gate models (gate/stacks/: a stack's ``truncation``).

The truncation fields are left out of the config's digest while unset, so configs written before them keep theirs.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, StrictBool, StrictInt, field_validator, model_validator

from gate import stacks
from gate.inputs.fields import BatchSize, Strict


def _modelled(name: str) -> str:
    if name not in stacks.orders():
        raise ValueError(f"no truncation order {name!r}: expected one of {', '.join(stacks.orders())}")
    return name


# A truncation order the gate models (gate.stacks.orders: a stack of the user's own may add one)
TruncationOrder = Annotated[str, AfterValidator(_modelled),
                            Field(json_schema_extra=lambda schema: schema.update(examples=list(stacks.orders())))]


def _unset(default):
    return Field(default, exclude_if=lambda v: v == default)


class SamplingConfig(Strict):
    temperature: Annotated[float, Field(gt=0.0, le=10.0)] = 0.8
    seed: Annotated[StrictInt, Field(ge=-(1 << 63), lt=1 << 63)] = 0
    batch_sizes: list[BatchSize] | None = None  # default: every batching.batch_sizes entry
    # 0 / 1.0 / 0.0: off (the whole tempered distribution)
    top_k: Annotated[StrictInt, Field(ge=0, le=1 << 20)] = _unset(0)
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] = _unset(1.0)
    min_p: Annotated[float, Field(ge=0.0, lt=1.0)] = _unset(0.0)
    truncation_order: TruncationOrder = _unset("vllm")

    @field_validator("batch_sizes")
    @classmethod
    def _some(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and not v:
            raise ValueError("expected at least one batch size, got []: leave it out to sample at every "
                             "batching.batch_sizes entry")
        return v

    @property
    def truncated(self) -> bool:
        return self.top_k > 0 or self.top_p < 1.0 or self.min_p > 0.0

    def truncation(self) -> dict:
        """What the engines are given besides the temperature (GenerationSettings' fields)."""
        return {"top_k": self.top_k, "top_p": self.top_p, "min_p": self.min_p, "order": self.truncation_order}

    def described(self) -> str:
        """``T=0.7, top_k 50, top_p 0.9`` (what a verdict line and a case's trigger say)."""
        parts = [f"T={self.temperature:g}"] + [f"{k} {v:g}" for k, v, off in (
            ("top_k", self.top_k, 0), ("top_p", self.top_p, 1.0), ("min_p", self.min_p, 0.0)) if v != off]
        return ", ".join(parts) + (f" ({self.truncation_order} order)" if self.min_p and (
            self.top_k or self.top_p < 1.0) else "")


class GenerationConfig(Strict):
    max_new_tokens: Annotated[StrictInt, Field(ge=1, le=4096)] = 48
    greedy: StrictBool = True
    sampling: SamplingConfig | None = None
    stop_at_eos: StrictBool = True

    @model_validator(mode="after")
    def _some_mode(self) -> GenerationConfig:
        if not self.greedy and self.sampling is None:
            raise ValueError("nothing to generate: set greedy: true or add a sampling: section")
        return self


__all__ = ["GenerationConfig", "SamplingConfig", "TruncationOrder"]
