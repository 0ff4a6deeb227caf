"""Tiny random-init models of many transformers architectures, for the architecture matrix.

Each entry builds a 2-layer target and a 1-layer draft of the same family from a
config written here (nothing is downloaded).  Sliding windows are 8 tokens, far
shorter than the prompts and outputs, so every window is crossed.
"""

from __future__ import annotations

import torch
from transformers import AutoConfig, AutoModelForCausalLM

VOCAB = 256
WINDOW = 8

# initializer_range 0.3, not the default 0.02: at 0.02 attention is nearly uniform and a tiny model's
# output hardly depends on positions, so a position bug would go unseen.
COMMON = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, pad_token_id=0, bos_token_id=1, eos_token_id=2,
              initializer_range=0.3)
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
# Gemma 2 and 3 with tied embeddings (or a larger init) just repeat their input token: nothing to compare.
GEMMA = dict(head_dim=8, sliding_window=WINDOW, tie_word_embeddings=False, initializer_range=0.1)

# name -> (model_type, config overrides, a line on what the entry covers)
ARCHITECTURES: dict[str, tuple[str, dict, str]] = {
    "llama": ("llama", {}, "full attention, RoPE"),
    "mistral": ("mistral", {"sliding_window": None}, "full attention"),
    "mistral_sliding": ("mistral", {"sliding_window": WINDOW}, "sliding window on every layer"),
    "mixtral": ("mixtral", {"num_local_experts": 4, "num_experts_per_tok": 2}, "mixture of experts"),
    "qwen2": ("qwen2", {}, "full attention, QKV bias"),
    "qwen2_sliding": ("qwen2", {"use_sliding_window": True, "sliding_window": WINDOW, "max_window_layers": 1},
                      "full layer 0, sliding layer 1 (use_sliding_window)"),
    "qwen2_moe": ("qwen2_moe", {**MOE, "shared_expert_intermediate_size": 32}, "mixture of experts, shared expert"),
    "qwen3": ("qwen3", {"head_dim": 8}, "QK norm"),
    "qwen3_moe": ("qwen3_moe", {**MOE, "head_dim": 8}, "mixture of experts, QK norm"),
    "deepseek_v3": ("deepseek_v3", {"kv_lora_rank": 16, "q_lora_rank": 16, "qk_rope_head_dim": 8,
                                    "qk_nope_head_dim": 8, "v_head_dim": 8, "n_routed_experts": 4,
                                    "num_experts_per_tok": 2, "moe_intermediate_size": 32, "n_group": 1,
                                    "topk_group": 1, "first_k_dense_replace": 1, "num_key_value_heads": 4},
                    "multi-head latent attention, MoE"),
    "phi": ("phi", {}, "partial rotary, parallel block"),
    "phi3": ("phi3", {}, "fused QKV"),
    "gemma": ("gemma", {"head_dim": 8}, "scaled embeddings"),
    "gemma2": ("gemma2", {**GEMMA, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0},
               "alternating sliding/full layers, soft-capping"),
    # Caps small enough to bite on a tiny random model (its attention scores are ~0.1): at 0.02, turning the
    # attention cap off moves the logits by 0.18 and flips an argmax (Gemma 2's own 50.0 moves them by 1e-6).
    # Not in the position test: a cap that strong makes attention nearly uniform, so positions stop mattering.
    "gemma2_capped": ("gemma2", {**GEMMA, "attn_logit_softcapping": 0.02, "final_logit_softcapping": 2.0},
                      "soft-capping strong enough to change outputs"),
    "gemma3_text": ("gemma3_text", {**GEMMA, "layer_types": ["sliding_attention", "full_attention"]},
                    "sliding/full layers with their own RoPE bases"),
    "cohere": ("cohere", {}, "parallel block, logit scale"),
    "cohere2": ("cohere2", {"sliding_window": WINDOW, "layer_types": ["sliding_attention", "full_attention"]},
                "sliding layers with RoPE, full layers without"),
    "starcoder2": ("starcoder2", {"sliding_window": WINDOW}, "sliding window, biases"),
    "olmo2": ("olmo2", {}, "post-norm, QK norm"),
    "granite": ("granite", {}, "scaled residuals and logits"),
    "smollm3": ("smollm3", {}, "RoPE skipped on some layers"),
    "gpt2": ("gpt2", {"n_embd": 32, "n_head": 4, "n_positions": 256}, "learned absolute positions"),
    "gptj": ("gptj", {"n_embd": 32, "n_head": 4, "n_positions": 256, "rotary_dim": 4}, "partial rotary"),
    "gpt_neox": ("gpt_neox", {}, "parallel residual, partial rotary"),
    "opt": ("opt", {"ffn_dim": 64, "word_embed_proj_dim": 32}, "learned positions with an offset"),
    "falcon": ("falcon", {}, "multi-query attention"),
    "bloom": ("bloom", {"n_head": 4}, "ALiBi"),
}


def build_config(name: str, layers: int):
    model_type, extra, _ = ARCHITECTURES[name]
    kw = {**COMMON, **extra, "num_hidden_layers": layers}
    if model_type in ("gpt2", "gptj", "bloom"):
        kw["n_layer"] = layers
    if "layer_types" in kw:
        kw["layer_types"] = kw["layer_types"][:layers]
    return AutoConfig.for_model(model_type, **kw)


def build_model(name: str, layers: int, seed: int, dtype=torch.float32):
    torch.manual_seed(seed)
    cfg = build_config(name, layers)
    return AutoModelForCausalLM.from_config(cfg, dtype=dtype).eval()


def build_pair(name: str, dtype=torch.float32):
    """(2-layer target, 1-layer draft): the draft is the target's first layer, embeddings and head, so it
    agrees with the target often but not always, and rows of a batch accept different numbers of tokens."""
    target = build_model(name, 2, 0, dtype)
    draft = build_model(name, 1, 1, dtype)
    draft.load_state_dict(target.state_dict(), strict=False)
    return target, draft
