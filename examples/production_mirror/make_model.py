"""Write ``llama70b/``: a 70B target as ``plan`` reads it, with no weights.

``config.json`` in Llama-3-70B's shape (80 layers, hidden 8192, 64 attention heads, 8 KV heads of 128, vocabulary
128,256), a ``model.safetensors`` that is a header only (every tensor's name, dtype and shape, as the real
checkpoint's index lists them, bf16; no data: ``plan`` reads headers, never tensors), and the demo pair's tokenizer
files (the real one is a hub download: the token counts ``plan`` prints are the demo tokenizer's, stated so in
docs/performance.md).  Run from the repository root: ``python examples/production_mirror/make_model.py``.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEMO = HERE.parents[1] / "gate" / "demo" / "target"
LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB = 80, 8192, 64, 8, 128, 28672, 128256


def tensors() -> dict[str, list[int]]:
    out = {"model.embed_tokens.weight": [VOCAB, HIDDEN], "model.norm.weight": [HIDDEN],
           "lm_head.weight": [VOCAB, HIDDEN]}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        out |= {p + "self_attn.q_proj.weight": [HEADS * HEAD_DIM, HIDDEN],
                p + "self_attn.k_proj.weight": [KV_HEADS * HEAD_DIM, HIDDEN],
                p + "self_attn.v_proj.weight": [KV_HEADS * HEAD_DIM, HIDDEN],
                p + "self_attn.o_proj.weight": [HIDDEN, HEADS * HEAD_DIM],
                p + "mlp.gate_proj.weight": [FFN, HIDDEN], p + "mlp.up_proj.weight": [FFN, HIDDEN],
                p + "mlp.down_proj.weight": [HIDDEN, FFN],
                p + "input_layernorm.weight": [HIDDEN], p + "post_attention_layernorm.weight": [HIDDEN]}
    return out


def main() -> None:
    out = HERE / "llama70b"
    out.mkdir(exist_ok=True)
    config = json.loads((DEMO / "config.json").read_text())
    config.update(hidden_size=HIDDEN, intermediate_size=FFN, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                  head_dim=HEAD_DIM, num_hidden_layers=LAYERS, vocab_size=VOCAB, max_position_embeddings=131072,
                  torch_dtype="bfloat16")
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    header, offset = {}, 0
    for name, shape in tensors().items():
        n = 2
        for d in shape:
            n *= d
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    (out / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(DEMO / f, out / f)
    print(f"wrote {out}: {sum(v['data_offsets'][1] - v['data_offsets'][0] for v in header.values()) / 2 / 1e9:.2f} B "
          f"parameters in the header, {len(raw) / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
