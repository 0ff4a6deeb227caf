#!/usr/bin/env python3
"""Replay a specguard minimal case against the engine alone, and say whether the failure is still there.

Copied by specguard into each case folder beside its ``case.json``; it needs nothing of specguard's analysis:

    python replay.py             # the engine the gate found failing, as case.json names it
    python replay.py --engine X  # an in-process engine: another build of its type (REPORT.md names the correct one)
    python replay.py --url URL   # a server: another address
    python replay.py --show      # also print every row's tokens

An equivalence case prints ``reproduced`` when the failing row's greedy tokens depart from the reference's expected
tokens at or before the failing position (anywhere, for a corruption signature), else ``not reproduced``.  A
sampling case re-runs every sampled batch with its seeds and re-scores the tokens with the target and the draft
(torch and transformers): ``reproduced`` when the draft-argmax count, the draft's log-probability, the draft-target
ratio or the randomized PIT departs from what the target's distribution gives, at the case's alpha (Bonferroni over
the four).  Exit 0 either way; 2: it could not run; 3: the engine answered, but no token ids could be read from a
row of its reply (never "reproduced": an empty row departs from anything).  How the engine is rebuilt is what its
type wrote in case.json (``engine.replay``): ``requests``, a server sent the batch's own request bodies (the
standard library; the equivalent ``curl`` lines are in REPORT.md); ``callable``, a plug-in's callable called as the
gate calls it (its own package, imported from ``pythonpath``); ``function``, the type's own function that rebuilds
an in-process engine and runs one batch (specguard's types: specguard, torch and transformers).
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class PluginSettings:
    """What specguard passes a plug-in (gate.engines.contract.PluginSettings, the same fields), so that a plug-in
    replays here as the gate called it, ``dataclasses.replace`` included."""

    max_new_tokens: list
    seeds: list
    temperature: float
    num_draft_tokens: int
    eos_token_ids: list
    target: str
    draft: str
    dtype: str
    device: str
    draft_dtype: str = "float32"
    extra: dict = field(default_factory=dict)
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    order: str = "vllm"

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def function(case: dict, variant: str | None, prompts: list, seeds: list, max_new: int) -> list[list[int]]:
    """An in-process engine: the function its type names (``callable``, imported from ``pythonpath``) rebuilds it
    alone and runs one batch (specguard's own types need specguard, torch and transformers)."""
    e = case["engine"]
    fn = _imported(e["callable"], e.get("pythonpath", []))
    return [list(row) for row in fn(e, [list(p) for p in prompts], list(seeds), max_new, case["settings"], variant)]


def _imported(name: str, pythonpath: list):
    import importlib

    sys.path[:0] = [p for p in pythonpath if p not in sys.path]
    module, _, attr = name.partition(":")
    fn = importlib.import_module(module)
    for part in attr.split("."):
        fn = getattr(fn, part)
    return fn


def plugin(case: dict, prompts: list, seeds: list, max_new: int) -> list[list[int]]:
    """The plug-in's callable, imported from its own folders, called as specguard calls it."""
    e, s = case["engine"], case["settings"]
    fn = _imported(e["callable"], e.get("pythonpath", []))
    settings = PluginSettings(**{**e["settings"], "max_new_tokens": [max_new] * len(prompts), "seeds": list(seeds),
                                 "temperature": s["temperature"], "num_draft_tokens": s["num_draft_tokens"],
                                 "eos_token_ids": list(s["eos_token_ids"])})
    out = fn([list(p) for p in prompts], len(prompts), settings)
    return [list(r["token_ids"] if isinstance(r, dict) else r.token_ids) for r in out]


class Unreadable(Exception):
    """The engine answered, but a row's token ids could not be read from its reply (or the request failed)."""


def _ids(event: dict) -> list[int]:
    """Token ids in one streamed event: llama-server's ``tokens``, SGLang's ``choices[].token_ids``, vLLM's
    ``choices[].logprobs.tokens`` ("token_id:N")."""
    if isinstance(event.get("tokens"), list):
        return [int(t) for t in event["tokens"]]
    out = []
    for choice in event.get("choices") or []:
        if isinstance(choice.get("token_ids"), list):
            out += [int(t) for t in choice["token_ids"]]
            continue
        for t in ((choice.get("logprobs") or {}).get("tokens") or []):
            out.append(int(str(t).removeprefix("token_id:")))
    return out


def http(case: dict, url: str | None, bodies: list[dict]) -> list[list[int]]:
    """Each row's request, all sent at once (the batch's rows in flight together, as the gate sends them)."""
    import threading

    e = case["engine"]
    base = (url or e["url"]).rstrip("/")
    out: list[list[int]] = [[] for _ in bodies]
    errors: dict[int, str] = {}

    def one(i: int, body: dict) -> None:
        req = urllib.request.Request(base + e["route"], data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=600) as resp:
                for raw in resp:
                    line = raw.decode("utf-8", "replace").strip()
                    if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
                        out[i] += _ids(json.loads(line[5:]))
        except Exception as exc:  # the row's outcome is "unreadable", said below, never a departure
            errors[i] = f"{type(exc).__name__}: {exc}"

    threads = [threading.Thread(target=one, args=(i, b)) for i, b in enumerate(bodies)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, row in enumerate(out):
        if i in errors or not row:
            raise Unreadable(f"row {i}: " + (errors.get(i) or "no token ids in the server's reply (read: tokens, "
                                             "choices[].token_ids, choices[].logprobs.tokens)")
                             + f" from {base}{e['route']}")
    return out


class CannotReplay(Exception):
    """case.json names no way to rebuild its engine alone."""


def run_batch(case: dict, args, prompts: list, seeds: list, max_new: int, batch: dict | None = None
              ) -> list[list[int]]:
    """One batch on the engine, the way its type said to rebuild it (case.json's ``engine.replay``)."""
    how = case["engine"].get("replay")
    if how == "function":
        return function(case, args.engine, prompts, seeds, max_new)
    if how == "callable":
        return plugin(case, prompts, seeds, max_new)
    if how == "requests":
        return http(case, args.url, (batch if batch is not None else case)["bodies"])
    raise CannotReplay(f"the engine's type ({case['engine'].get('type')!r}) says no way to rebuild it alone "
                       f"(engine.replay is {how!r})")


def equivalence(case: dict, args) -> None:
    s = case["settings"]
    outs = run_batch(case, args, case["prompts"], [s.get("seed", 0)] * len(case["prompts"]), s["max_new_tokens"])
    f = case["finding"]
    row, position, expected = f["row"], f["position"], f["expected"]
    got = outs[row] if row < len(outs) else []
    if args.show:
        for i, o in enumerate(outs):
            print(f"row {i}: {o}")
    departs = next((t for t, (a, b) in enumerate(zip(got, expected)) if a != b),
                   None if len(got) == len(expected) else min(len(got), len(expected)))
    # a corruption signature (tokens after EOS, a loop, a truncation) may show only after its position: any departure
    within = len(expected) if f["kind"].startswith("signature") else position
    if departs is not None and departs <= within:
        print(f"reproduced: row {row} departs from the expected tokens at new token {departs} "
              f"(expected {expected[departs] if departs < len(expected) else 'end'}, "
              f"got {got[departs] if departs < len(got) else 'end'})")
    else:
        print(f"not reproduced: row {row} matches the expected tokens up to new token {within}")


def ks_pvalue(u: list[float]) -> float:
    """Kolmogorov-Smirnov against uniform(0, 1): the asymptotic p-value (Stephens' small-sample correction)."""
    import math

    u, n = sorted(u), len(u)
    d = max(max((i + 1) / n - x, x - i / n) for i, x in enumerate(u))
    lam = (math.sqrt(n) + 0.12 + 0.11 / math.sqrt(n)) * d
    return max(0.0, min(1.0, 2 * sum((-1) ** (k - 1) * math.exp(-2 * k * k * lam * lam) for k in range(1, 101))))


def sampling(case: dict, args) -> None:
    """Re-run every sampled batch with its seeds, re-score each emitted token with the target and the draft
    (transformers, teacher-forced, at the case's temperature), and test what must hold when tokens come from the
    target: 1[token = draft's argmax] - p(draft's argmax), log q(token) - E_p[log q], and q/(p + q) at the token
    less its mean under p have mean 0 (z-scores), and the randomized PIT F(token - 1) + U p(token) is uniform
    (Kolmogorov-Smirnov): the gate's four tests, recomputed here."""
    import random
    from statistics import NormalDist

    import torch
    from transformers import AutoModelForCausalLM

    s, m = case["settings"], case["models"]
    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "auto": torch.float32}
    target = AutoModelForCausalLM.from_pretrained(m["target"], dtype=dtypes[m["dtype"]]).eval()
    draft = AutoModelForCausalLM.from_pretrained(m["draft"], dtype=dtypes[m["draft_dtype"]]).eval()
    sums = {"hits": 0.0, "expected": 0.0, "top_var": 0.0, "logq": 0.0, "logq_var": 0.0, "ratio": 0.0,
            "ratio_var": 0.0, "tokens": 0}
    pit: list[float] = []
    rng = random.Random(0)
    for batch in case["batches"]:
        outs = run_batch(case, args, batch["prompts"], batch["seeds"], batch["max_new_tokens"], batch)
        for prompt, out in zip(batch["prompts"], outs):
            if not out:
                continue
            ids = torch.tensor([list(prompt) + list(out)])
            with torch.inference_mode():
                p = torch.softmax(target(ids).logits[0, len(prompt) - 1:-1].double() / s["temperature"], -1)
                q = torch.softmax(draft(ids).logits[0, len(prompt) - 1:-1].double() / s["temperature"], -1)
            y = torch.tensor(out)
            top = q.argmax(-1)
            mt = p.gather(1, top[:, None])[:, 0]
            logq = q.clamp(min=1e-30).log()
            mean = (p * logq).sum(1)
            sums["hits"] += float((y == top).sum())
            sums["expected"] += float(mt.sum())
            sums["top_var"] += float((mt * (1 - mt)).sum())
            sums["logq"] += float((logq.gather(1, y[:, None])[:, 0] - mean).sum())
            sums["logq_var"] += float(((p * logq.square()).sum(1) - mean.square()).clamp(min=0).sum())
            ratio = q / (p + q).clamp(min=1e-300)  # the score direction of a mixture towards q
            r_mean = (p * ratio).sum(1)
            sums["ratio"] += float((ratio.gather(1, y[:, None])[:, 0] - r_mean).sum())
            sums["ratio_var"] += float(((p * ratio.square()).sum(1) - r_mean.square()).clamp(min=0).sum())
            sums["tokens"] += len(out)
            p_y = p.gather(1, y[:, None])[:, 0]
            below = (p.cumsum(1).gather(1, y[:, None])[:, 0] - p_y).clamp(min=0)
            pit += [min(1.0, float(b) + rng.random() * float(py)) for b, py in zip(below, p_y)]
    z_top = (sums["hits"] - sums["expected"]) / sums["top_var"] ** 0.5 if sums["top_var"] else 0.0
    z_logq = sums["logq"] / sums["logq_var"] ** 0.5 if sums["logq_var"] else 0.0
    z_ratio = sums["ratio"] / sums["ratio_var"] ** 0.5 if sums["ratio_var"] else 0.0
    normal = NormalDist()
    pvalues = {"draft_top": 2 * normal.cdf(-abs(z_top)), "draft_logprob": 2 * normal.cdf(-abs(z_logq)),
               "draft_ratio": 2 * normal.cdf(-abs(z_ratio)), "pit_ks": ks_pvalue(pit) if pit else 1.0}
    print(f"{sums['tokens']} tokens: the draft's argmax emitted {sums['hits']:.0f} times, "
          f"{sums['expected']:.1f} expected under the target (z = {z_top:+.2f}); log q(token) z = {z_logq:+.2f}; "
          f"p-values {', '.join(f'{k} {v:.2g}' for k, v in pvalues.items())}")
    bound = s["alpha"] / len(pvalues)  # Bonferroni over the four tests, at the case's alpha
    if min(pvalues.values()) < bound:
        print(f"reproduced: p < {bound:.3g}: the tokens are not drawn from the target's distribution")
    else:
        print(f"not reproduced: every p-value >= {bound:.3g}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", help="an in-process engine: another build of its type (REPORT.md names them: the "
                    "correct engine, or a self-test mutant by name)")
    ap.add_argument("--url", help="a server: replay against this address instead")
    ap.add_argument("--show", action="store_true", help="print every row's tokens")
    args = ap.parse_args()
    case = json.loads((HERE / "case.json").read_text())
    try:
        (sampling if case["check"] == "distribution" else equivalence)(case, args)
    except Unreadable as exc:  # neither reproduced nor not: the reply says nothing of the tokens
        print(f"unreadable: {exc}")
        return 3
    except CannotReplay as exc:
        print(f"cannot replay: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # the engine itself failed: say so, not a verdict
        print(f"could not run the {case['engine'].get('type')} engine: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
