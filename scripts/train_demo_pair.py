"""Train the embedded demo model pair (target + draft) from a seed.

The pair is deliberately tiny so that the whole gate runs on a laptop CPU:

* a shared byte-level BPE tokenizer trained with the ``tokenizers`` library;
* a 20-layer, width-256 Llama target trained on the Python documentation corpus that ships
  with every CPython (``pydoc_data/topics.py``), so nothing is downloaded;
* a 1-layer Llama draft distilled from the target: first with a KL loss on the
  target's next-token distributions over the corpus, then on the target's own
  greedy continuations, which is what speculative decoding asks it to predict.

Weights are stored in bfloat16 (upcast at load) to keep the repository small.

    python scripts/train_demo_pair.py --out gate/demo --seed 0

writes ``target/``, ``draft/`` and ``training.json`` (losses and settings) into
``--out``.  Run it alone: on 2 cores it takes roughly a quarter of an hour.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

import torch
import torch.nn.functional as F

VOCAB_SIZE = 2048
SPECIALS = ["<pad>", "<s>", "</s>"]  # ids 0, 1, 2
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2

# Deep and thin (as MobileLLM recommends for small models): 20 layers of width 256.
# At this size a decode step's cost is mostly per-layer, so depth is what makes one
# target step cost ~10x a draft step, as a real 7B/1B-class pair does.
TARGET_SHAPE = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=20,
                    num_attention_heads=4, num_key_value_heads=4)
DRAFT_SHAPE = dict(hidden_size=128, intermediate_size=384, num_hidden_layers=1,
                   num_attention_heads=4, num_key_value_heads=4)


def load_corpus() -> tuple[list[str], list[str]]:
    """Documentation topics from the standard library; every 10th topic is held out."""
    from pydoc_data.topics import topics

    docs = [topics[k] for k in sorted(topics)]
    train = [d for i, d in enumerate(docs) if i % 10 != 5]
    val = [d for i, d in enumerate(docs) if i % 10 == 5]
    return train, val


def train_tokenizer(texts: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
        model_input_names=["input_ids", "attention_mask"],
    )


def llama(shape: dict, seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=VOCAB_SIZE, max_position_embeddings=2048, rope_theta=10000.0,
        tie_word_embeddings=True, pad_token_id=PAD_ID, bos_token_id=BOS_ID, eos_token_id=EOS_ID,
        **shape,
    )
    return LlamaForCausalLM(cfg)


def pack(tokenizer, docs: list[str]) -> torch.Tensor:
    ids: list[int] = []
    for d in docs:
        ids += [BOS_ID] + tokenizer(d)["input_ids"] + [EOS_ID]
    return torch.tensor(ids, dtype=torch.long)


def batches(stream: torch.Tensor, seq_len: int, batch: int, rng: random.Random):
    while True:
        starts = [rng.randrange(0, len(stream) - seq_len - 1) for _ in range(batch)]
        yield torch.stack([stream[s:s + seq_len] for s in starts])


@torch.no_grad()
def val_loss(model, stream: torch.Tensor, seq_len: int) -> float:
    model.eval()
    n = (len(stream) - 1) // seq_len
    x = stream[: n * seq_len].view(n, seq_len)
    losses = [model(input_ids=x[i:i + 8], labels=x[i:i + 8]).loss.item() for i in range(0, n, 8)]
    model.train()
    return sum(losses) / len(losses)


def lr_at(step: int, total: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def fit(model, steps: int, peak_lr: float, loss_fn, data, log: list, name: str, evaluate,
        metric: str = "val_loss"):
    """Train; keep the checkpoint with the lowest ``evaluate`` value (logged as ``metric``)."""
    opt = torch.optim.AdamW(model.parameters(), lr=peak_lr, weight_decay=0.1, betas=(0.9, 0.95))
    model.train()
    best, best_state = float("inf"), None
    t0 = time.time()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, peak_lr, warmup=max(1, steps // 20))
        loss = loss_fn(model, next(data))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (step + 1) % max(1, steps // 10) == 0 or step + 1 == steps:
            v = evaluate(model)
            log.append({"model": name, "step": step + 1, "train_loss": round(loss.item(), 4),
                        metric: round(v, 4), "elapsed_s": round(time.time() - t0, 1)})
            print(json.dumps(log[-1]), flush=True)
            if v < best:
                best, best_state = v, {k: t.detach().clone() for k, t in model.state_dict().items()}
    model.load_state_dict(best_state)
    model.eval()
    return best


def lm_loss(model, x):
    return model(input_ids=x, labels=x).loss


def kl_loss(teacher):
    def loss(model, x):
        with torch.no_grad():
            t_logp = F.log_softmax(teacher(input_ids=x).logits.float(), dim=-1)
        s_logp = F.log_softmax(model(input_ids=x).logits.float(), dim=-1)
        return F.kl_div(s_logp, t_logp, log_target=True, reduction="none").sum(-1).mean()
    return loss


@torch.no_grad()
def greedy_continuations(target, stream: torch.Tensor, n: int, prefix: int, new: int,
                         rng: random.Random) -> torch.Tensor:
    """The target's own greedy continuations of random corpus prefixes (batched)."""
    out = []
    for _ in range(0, n, 32):
        starts = [rng.randrange(0, len(stream) - prefix - 1) for _ in range(32)]
        x = torch.stack([stream[s:s + prefix] for s in starts])
        g = target.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=new,
                            do_sample=False, pad_token_id=PAD_ID, eos_token_id=None)
        out.append(g)
    return torch.cat(out)[:n]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("gate/demo"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=640)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--target-steps", type=int, default=700)
    ap.add_argument("--draft-kl-steps", type=int, default=700)
    ap.add_argument("--draft-greedy-steps", type=int, default=400)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)

    train_docs, val_docs = load_corpus()
    tokenizer = train_tokenizer(train_docs)
    train_ids, val_ids = pack(tokenizer, train_docs), pack(tokenizer, val_docs)
    print(f"tokens: train {len(train_ids)}, val {len(val_ids)}", flush=True)
    log: list[dict] = []

    def evaluate(m):
        return val_loss(m, val_ids, 256)

    target = llama(TARGET_SHAPE, args.seed)
    t_val = fit(target, args.target_steps, 1e-3, lm_loss,
                batches(train_ids, args.seq_len, args.batch, rng), log, "target", evaluate)

    draft = llama(DRAFT_SHAPE, args.seed + 1)
    fit(draft, args.draft_kl_steps, 3e-3, kl_loss(target),
        batches(train_ids, args.seq_len, args.batch, rng), log, "draft-kl", evaluate)

    # Stage 2: imitate the target's greedy continuations (loss only on generated tokens).
    # The checkpoint kept is the one that agrees best with the target's greedy choices on
    # continuations of held-out text, which is what acceptance measures.
    prefix, new = 48, 64
    cont = greedy_continuations(target, train_ids, 960, prefix, new, rng)
    held_out = greedy_continuations(target, val_ids, 64, prefix, new, rng)

    @torch.no_grad()
    def disagreement(m) -> float:
        m.eval()
        pred = m(input_ids=held_out).logits[:, prefix - 1:-1].argmax(-1)
        m.train()
        return 1.0 - (pred == held_out[:, prefix:]).float().mean().item()

    log.append({"model": "draft-kl", "held_out_greedy_agreement": round(1 - disagreement(draft), 4)})
    print(json.dumps(log[-1]), flush=True)

    def cont_batches():
        while True:
            yield cont[torch.tensor([rng.randrange(len(cont)) for _ in range(16)])]

    def greedy_loss(model, x):
        labels = x.clone()
        labels[:, :prefix] = -100
        return model(input_ids=x, labels=labels).loss + kl_loss(target)(model, x)

    fit(draft, args.draft_greedy_steps, 1e-3, greedy_loss, cont_batches(), log, "draft-greedy", disagreement,
        metric="held_out_greedy_disagreement")
    d_val = evaluate(draft)
    agreement = 1 - disagreement(draft)

    args.out.mkdir(parents=True, exist_ok=True)
    for name, model in (("target", target), ("draft", draft)):
        d = args.out / name
        model.generation_config.pad_token_id = PAD_ID
        model.generation_config.bos_token_id = BOS_ID
        model.generation_config.eos_token_id = EOS_ID
        model.to(torch.bfloat16).save_pretrained(d)
        tokenizer.save_pretrained(d)
    summary = {
        "seed": args.seed, "vocab_size": VOCAB_SIZE, "seq_len": args.seq_len, "batch": args.batch,
        "corpus": "pydoc_data.topics (CPython stdlib), every 10th topic held out for validation",
        "train_tokens": len(train_ids), "val_tokens": len(val_ids),
        "target_val_loss": round(t_val, 4), "draft_val_loss": round(d_val, 4),
        "draft_held_out_greedy_agreement": round(agreement, 4),
        "target_params": sum(p.numel() for p in target.parameters()),
        "draft_params": sum(p.numel() for p in draft.parameters()),
        "log": log,
    }
    (args.out / "training.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "log"}, indent=2))


if __name__ == "__main__":
    main()
