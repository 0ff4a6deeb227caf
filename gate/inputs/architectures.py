"""Which transformers architectures the gate's own engines run exactly, and why the others are refused.

The reference and speculative engines feed every model through one ragged
layout (:mod:`gate.engines.layout`): one KV cache with a column per token slot,
a hand-built additive mask and explicit position ids.  That is exact for an
architecture whose attention depends on nothing but those three:

* full causal attention (Llama, Qwen, Mixtral, DeepSeek, Phi, GPT-2, OPT, ...);
* sliding-window attention, on some or all layers (Mistral, Qwen2 with
  ``use_sliding_window``, Gemma 2 and 3, StarCoder2, Cohere2): the layout keeps
  every column on every layer and puts the window in the mask, counted in
  positions, so a hole never shortens or widens a window.  Soft-capping
  (Gemma 2) happens inside the model's own attention and needs nothing here.

An architecture that needs anything else is refused at load time, with the
reason and what does work, instead of crashing mid-run or, worse, giving a
quietly wrong reference.  :data:`REFUSED` and :func:`refusal` are the one place
that knowledge lives; the architecture matrix (``tests/test_architectures.py``)
checks every supported family against ``model.generate()`` and every refusal.
"""

from __future__ import annotations

from dataclasses import dataclass

# model_type -> why the ragged layout cannot be exact for it.
REFUSED: dict[str, str] = {
    "bloom": "ALiBi attention biases are built from a 2D padding mask inside the model; the ragged layout "
             "passes a 4D mask with holes, which ALiBi cannot take",
    "mpt": "ALiBi attention biases are built inside the model from its own sequence layout, not from the "
           "position ids and mask the ragged layout passes",
}

# Layer types the layout knows how to mask; anything else keeps a cache or mask it does not manage.
FULL, SLIDING = "full_attention", "sliding_attention"
KNOWN_LAYER_TYPES = (FULL, SLIDING)

# What works when the gate's in-process engines cannot run an architecture.
WORKS_INSTEAD = ("gate it through a serving stack: an engine of `type: http` with `http.reference` "
                 "(the same stack with speculation off as the reference), see docs/serving.md")


@dataclass(frozen=True)
class Attention:
    """How one model attends: the sliding window of each layer type (None: full attention)."""

    windows: dict[str, int | None]

    @property
    def hybrid(self) -> bool:
        """Several layer types with different masks: the model takes a mask per layer type."""
        return len(set(self.windows.values())) > 1


def refusal(config) -> str | None:
    """Why the ragged layout cannot run a model with this transformers ``config`` exactly, or None."""
    model_type = getattr(config, "model_type", "?")
    if model_type in REFUSED:
        return REFUSED[model_type]
    if getattr(config, "alibi", False):  # falcon with alibi=True
        return REFUSED["bloom"].replace("ALiBi", "ALiBi (alibi: true)", 1)
    if getattr(config, "is_encoder_decoder", False):
        return "an encoder-decoder model: the gate decodes causal language models only"
    other = sorted({t for t in (getattr(config, "layer_types", None) or []) if t not in KNOWN_LAYER_TYPES})
    if other:
        return (f"its layer types {other} keep state (recurrent, linear or chunked attention) that the ragged "
                f"layout's KV cache and mask do not manage")
    return None


def attention(config) -> Attention:
    """Each layer type's window, as the model's own code reads its config (call :func:`refusal` first)."""
    window = getattr(config, "sliding_window", None)
    if getattr(config, "use_sliding_window", True) is False:  # qwen2/qwen3/smollm3 style: off unless asked
        window = None
    types = getattr(config, "layer_types", None)
    if not types:  # one kind of layer: Mistral, StarCoder2, Mixtral, Phi-3 read config.sliding_window
        return Attention({FULL: window})
    return Attention({t: (window if t == SLIDING else None) for t in dict.fromkeys(types)})


def describe(config) -> str:
    """``model_type`` plus the attention kinds, for messages."""
    model_type = getattr(config, "model_type", "?")
    if refusal(config):
        return model_type
    att = attention(config)
    kinds = sorted({"full" if w is None else f"sliding window {w}" for w in att.windows.values()})
    return f"{model_type} ({', '.join(kinds)})"
