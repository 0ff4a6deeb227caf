"""Train an EAGLE (EAGLE-1) head for the demo target, in the layout vLLM's ``method: eagle`` loads (issue 47, item 3).

An EAGLE head is not a causal LM: it has no embedding and no output layer of its own (it borrows the target's),
and it reads the target's hidden states.  At each position i it maps ``fc([embed(x[i+1]), h[i]])`` through one
decoder layer (no input norm) to a guess of ``h[i+1]``, the target's final hidden state there; the target's own
output layer turns that into the next draft token.  Trained here on the target's hidden states over the same
corpus the demo pair learned from (CPython's pydoc topics: nothing downloaded), with a feature loss (smooth L1)
plus the KL from the target's next-token distribution, as EAGLE does.

    python scripts/train_eagle_head.py --out gate/demo/eagle --steps 600 --seed 0

writes ``config.json`` (a one-layer ``LlamaForCausalLM`` of the target's width, which vLLM wraps as
``EagleLlamaForCausalLM``), ``model.safetensors`` (``fc.weight`` and ``layers.0.*``, bf16: vLLM reads the rest from
the target) and ``training.json``.  A few minutes on 2 cores.  Serve it with vLLM's
``--speculative-config '{"method": "eagle", "model": "<out>", "num_speculative_tokens": 4}'``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from train_demo_pair import batches, load_corpus, lr_at, pack  # noqa: E402


class Head(torch.nn.Module):
    def __init__(self, cfg):
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

        super().__init__()
        self.fc = torch.nn.Linear(2 * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.layer = LlamaDecoderLayer(cfg, layer_idx=0)
        self.layer.input_layernorm = torch.nn.Identity()  # EAGLE's first layer has none; vLLM drops it too
        self.rotary = LlamaRotaryEmbedding(cfg)

    def forward(self, embeds: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        x = self.fc(torch.cat((embeds, hidden), dim=-1))
        positions = torch.arange(x.shape[1]).unsqueeze(0).expand(x.shape[0], -1)
        n = x.shape[1]
        mask = torch.full((n, n), float("-inf")).triu(1)[None, None]
        out = self.layer(x, attention_mask=mask, position_ids=positions,
                         position_embeddings=self.rotary(x, positions))
        return out[0] if isinstance(out, tuple) else out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", type=Path, default=ROOT / "gate" / "demo" / "target")
    ap.add_argument("--out", type=Path, default=ROOT / "gate" / "demo" / "eagle")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

    torch.manual_seed(args.seed)
    target = AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.float32).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    tokenizer = AutoTokenizer.from_pretrained(args.target)
    train_docs, val_docs = load_corpus()
    train, val = pack(tokenizer, train_docs), pack(tokenizer, val_docs)
    tcfg = target.config
    cfg = LlamaConfig(**{**tcfg.to_dict(), "num_hidden_layers": 1, "architectures": ["LlamaForCausalLM"],
                         "tie_word_embeddings": False, "dtype": "bfloat16"})
    cfg._attn_implementation = "eager"
    head = Head(cfg)
    opt = torch.optim.AdamW(head.parameters(), lr=args.lr, weight_decay=0.0)
    embed, lm_head = target.get_input_embeddings(), target.get_output_embeddings()

    def losses(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            h = target.model(x).last_hidden_state  # after the final norm: what vLLM hands the head
            p = F.log_softmax(lm_head(h[:, 1:]), -1)
        pred = head(embed(x[:, 1:]), h[:, :-1])  # at i: embed(x[i+1]) and h[i] -> h[i+1]
        feature = F.smooth_l1_loss(pred, h[:, 1:])
        logq = F.log_softmax(lm_head(pred), -1)
        kl = F.kl_div(logq, p, log_target=True, reduction="batchmean") / pred.shape[1]
        agree = (logq.argmax(-1) == p.argmax(-1)).float().mean()
        return feature, kl, agree

    rng = random.Random(args.seed)
    data = batches(train, args.seq_len, args.batch, rng)
    log = []
    started = time.time()
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, args.lr, min(50, args.steps // 10))
        feature, kl, agree = losses(next(data))
        loss = feature + 0.1 * kl
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == args.steps - 1:
            log.append({"step": step, "feature": feature.item(), "kl": kl.item(), "top1": agree.item(),
                        "s": round(time.time() - started, 1)})
            print(log[-1], flush=True)
    with torch.no_grad():
        vrng = random.Random(args.seed + 1)
        vb = batches(val, args.seq_len, args.batch, vrng)
        held = [losses(next(vb)) for _ in range(8)]
    val_top1 = sum(a.item() for *_, a in held) / len(held)
    print(f"held-out: the head's next token is the target's argmax {val_top1:.1%} of the time")

    args.out.mkdir(parents=True, exist_ok=True)
    state = {"fc.weight": head.fc.weight}
    for name, tensor in head.layer.state_dict().items():
        state[f"layers.0.{name}"] = tensor
    save_file({k: v.detach().to(torch.bfloat16).contiguous() for k, v in state.items()},
              str(args.out / "model.safetensors"), metadata={"format": "pt"})
    config = {k: v for k, v in cfg.to_dict().items() if not k.startswith("_")}
    (args.out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    (args.out / "training.json").write_text(json.dumps(
        {"steps": args.steps, "batch": args.batch, "seq_len": args.seq_len, "lr": args.lr, "seed": args.seed,
         "held_out_top1": val_top1, "seconds": round(time.time() - started, 1), "log": log}, indent=1) + "\n")
    print(args.out)


if __name__ == "__main__":
    main()
