#!/usr/bin/env python3
"""Replay a specguard minimal case against the engine alone, and say whether the failure is still there.

Copied by specguard into each case folder beside its ``case.json``; it needs nothing of specguard's analysis:

    python replay.py             # the engine the gate found failing, as case.json names it
    python replay.py --engine X  # an in-process engine: another build of its type (REPORT.md names the correct one)
    python replay.py --url URL   # a server: another address
    python replay.py --show      # also print every row's tokens
    python replay.py --recorded  # a sampling case: recount the tokens case.json recorded (no engine run)

An equivalence case prints ``reproduced`` when the failing row's greedy tokens depart from the reference's expected
tokens at or before the failing position (anywhere, for a corruption signature), else ``not reproduced``.  A
sampling case re-runs every sampled batch with its seeds, re-scores the tokens with the target (and the draft,
where the method has one) through torch and transformers at the case's temperature and truncation, and recounts
the gate's tests that case.json names (``tests``) with numpy alone: the draft model's argmax, log-probability and
draft-target ratio, the target's own argmax and log-probability (a method without a draft model), the n-gram
lookup's proposal recomputed from the context, and the randomized PIT; ``reproduced`` when the smallest p-value is
below the case's alpha over the number of tests (the gate's Bonferroni), or, for a case about the truncation
(``decide: outside``), when any emitted token lies outside it.  Exit 1: reproduced (so ``git bisect run`` reads
it as bad); 0: not reproduced; 2: it could not run; 3: the engine answered, but no token ids could be read from a
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
    t = {k: v for k, v in (s.get("truncation") or {}).items() if k in ("top_k", "top_p", "min_p", "order")}
    settings = PluginSettings(**{**e["settings"], "max_new_tokens": [max_new] * len(prompts), "seeds": list(seeds),
                                 "temperature": s["temperature"], "num_draft_tokens": s["num_draft_tokens"],
                                 "eos_token_ids": list(s["eos_token_ids"]), **t})
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


def equivalence(case: dict, args) -> int:
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
        return 1
    print(f"not reproduced: row {row} matches the expected tokens up to new token {within}")
    return 0


def ks_pvalue(u: list[float]) -> float:
    """Kolmogorov-Smirnov against uniform(0, 1): the asymptotic p-value (Stephens' small-sample correction)."""
    import math

    u, n = sorted(u), len(u)
    d = max(max((i + 1) / n - x, x - i / n) for i, x in enumerate(u))
    lam = (math.sqrt(n) + 0.12 + 0.11 / math.sqrt(n)) * d
    return max(0.0, min(1.0, 2 * sum((-1) ** (k - 1) * math.exp(-2 * k * k * lam * lam) for k in range(1, 101))))


# The gate's distribution tests (a case written before case.json named them: the draft model's four)
DRAFT_TESTS = ["pit_ks", "draft_top", "draft_logprob", "draft_ratio"]


def _softmax(x):
    import numpy as np

    m = x.max(-1, keepdims=True)
    e = np.exp(x - np.where(np.isfinite(m), m, 0.0))
    return e / e.sum(-1, keepdims=True)


def distribution(logits, s: dict):
    """The distribution a token is drawn from, as numpy float64 [positions, V]: ``logits / T``, then every token
    the truncation drops at -inf, step by step in the case's order (``truncation.steps``: the stack's), then
    renormalised.  Each mask as the stacks apply it: top_k keeps ties at the k-th logit; top_p drops the least
    likely tokens whose ascending cumulative probability stays within 1 - top_p, never the most likely one;
    min_p drops the tokens below min_p times the largest probability of what reaches it."""
    import numpy as np

    x = np.asarray(logits, dtype=np.float32) / np.float32(s["temperature"])  # as the samplers temper: float32
    t = s.get("truncation") or {}
    k, top_p, min_p = int(t.get("top_k", 0)), float(t.get("top_p", 1.0)), float(t.get("min_p", 0.0))
    for step in t.get("steps", []):
        if step == "top_k" and 0 < k < x.shape[-1]:
            kth = -np.sort(-x, axis=-1)[:, k - 1:k]
            x = np.where(x < kth, -np.inf, x)
        elif step == "top_p" and top_p < 1.0:
            order = np.argsort(x, axis=-1, kind="stable")
            drop = np.cumsum(_softmax(np.take_along_axis(x, order, -1)), -1) <= 1.0 - top_p
            drop[:, -1] = False
            mask = np.zeros_like(drop)
            np.put_along_axis(mask, order, drop, -1)
            x = np.where(mask, -np.inf, x)
        elif step == "min_p" and min_p > 0.0:
            p = _softmax(x)
            x = np.where(p < min_p * p.max(-1, keepdims=True), -np.inf, x)
    return _softmax(x.astype(np.float64))


def lookup(context: list, min_n: int, max_n: int):
    """The n-gram lookup's first proposed token after ``context`` (None: none): the longest n-gram of the context's
    end, from ``max_n`` down to ``min_n`` tokens, at its earliest earlier occurrence (ending before the context's
    last token), and the token that followed it there (vLLM's prompt lookup)."""
    total = len(context)
    for n in range(min(max_n, total - 1), min_n - 1, -1):
        suffix = context[total - n:]
        for start in range(0, total - n):
            if context[start:start + n] == suffix:
                return context[start + n] if start + n < total else None
    return None


class Recount:
    """The gate's distribution statistics, recounted on their own (numpy; no specguard): each row's sums kept, so a
    prefix of the rows is recounted without re-scoring.  ``tests``: the check's (``pit_ks`` and the method's
    ``draft_*``, ``target_*`` or ``ngram_top``), each a z-test of a statistic with mean 0 under the target's
    distribution p, save the randomized PIT's Kolmogorov-Smirnov test; and every emitted token the truncated p
    gives probability 0, which fails by itself (outside the truncation)."""

    def __init__(self, settings: dict, tests: list, ngram: list | None = None, seed: int = 0):
        self.s, self.tests, self.ngram, self.seed = settings, list(tests), ngram, seed
        self.rows: list[dict] = []

    def add(self, prompt: list, out: list, target_logits, draft_logits=None) -> dict:
        """One row: its prompt, its emitted tokens and the logits that predicted each of them ([len(out), V])."""
        row = self.row(prompt, out, target_logits, draft_logits)
        self.rows.append(row)
        return row

    def row(self, prompt: list, out: list, target_logits, draft_logits=None) -> dict:
        """One row's sums, kept by no one (:meth:`add` keeps them; the gate scores rows in its own order)."""
        import numpy as np

        p = distribution(target_logits, self.s)
        y = np.asarray(out, dtype=np.int64)
        at = np.arange(len(out))
        p_y = p[at, y]
        row: dict = {"tokens": len(out), "outside": [int(i) for i in np.nonzero(p_y == 0)[0]], "sums": {},
                     "hits": {}}
        row["pit"] = (np.clip(np.cumsum(p, -1)[at, y] - p_y, 0, None).tolist(), p_y.tolist())  # F(y - 1), p(y)
        q = distribution(draft_logits, self.s) if draft_logits is not None else p
        for test in self.tests:
            if test.endswith("_top"):
                if test == "ngram_top":
                    ctx = [int(t) for t in prompt]
                    top = []
                    for i, token in enumerate(out):
                        got = lookup(ctx, *self.ngram)
                        top.append(got if got is not None and got < p.shape[1] else int(p[i].argmax()))
                        ctx.append(int(token))
                    top = np.asarray(top, dtype=np.int64)
                else:  # the draft's argmax, or the target's own (q = p)
                    top = q.argmax(-1)
                m = p[at, top]
                hits = float((y == top).sum())
                row["hits"][test] = (hits, float(m.sum()))
                row["sums"][test] = (hits - float(m.sum()), float((m * (1 - m)).sum()))
            elif test.endswith("_logprob"):
                logq = np.log(np.clip(q, 1e-30, None))
                mean = (p * logq).sum(-1)
                var = np.clip((p * logq ** 2).sum(-1) - mean ** 2, 0, None)
                row["sums"][test] = (float((logq[at, y] - mean).sum()), float(var.sum()))
            elif test == "draft_ratio":  # the score direction of a mixture towards q
                ratio = q / np.clip(p + q, 1e-300, None)
                mean = (p * ratio).sum(-1)
                var = np.clip((p * ratio ** 2).sum(-1) - mean ** 2, 0, None)
                row["sums"][test] = (float((ratio[at, y] - mean).sum()), float(var.sum()))
        return row

    def result(self, rows: int | None = None) -> dict:
        """The recount over the first ``rows`` rows (all by default): tokens, tokens outside the truncation, each
        test's z (None for the KS) and p-value, and the draft's / target's / lookup's top-token hits."""
        import random
        from statistics import NormalDist

        kept = self.rows[:rows] if rows is not None else self.rows
        rng = random.Random(self.seed)  # the PIT's randomizing uniforms, row by row: a prefix draws the same
        out: dict = {"tokens": sum(r["tokens"] for r in kept), "outside": sum(len(r["outside"]) for r in kept),
                     "z": {}, "pvalues": {}, "hits": {}}
        for test in self.tests:
            if test == "pit_ks":
                pit = [min(1.0, b + rng.random() * py) for r in kept for b, py in zip(*r["pit"])]
                out["pvalues"][test] = ks_pvalue(pit) if pit else 1.0
                continue
            total = sum(r["sums"][test][0] for r in kept)
            var = sum(r["sums"][test][1] for r in kept)
            z = total / var ** 0.5 if var > 0 else 0.0
            out["z"][test] = z
            out["pvalues"][test] = 2 * NormalDist().cdf(-abs(z))
            if test.endswith("_top"):
                out["hits"][test] = (sum(r["hits"][test][0] for r in kept), sum(r["hits"][test][1] for r in kept))
        return out

    def verdict(self, alpha: float, decide: str = "tests", rows: int | None = None) -> tuple[bool, list[str]]:
        """Whether the recount reproduces the failure, and the lines that say what it recounted.  ``decide``:
        ``outside`` (a token outside the truncation fails by itself) or ``tests`` (the smallest p-value below alpha
        over the number of tests: the gate's Bonferroni)."""
        r = self.result(rows)
        lines = [f"{r['tokens']} tokens recounted against the target's distribution"
                 + (f" ({_described(self.s)})" if self.s.get("truncation") else f" (T={self.s['temperature']:g})")]
        if self.s.get("truncation"):
            lines.append(f"outside the truncation: {r['outside']} emitted token(s) the truncated distribution gives "
                         "probability 0")
        whose = {"draft_top": "the draft's argmax", "target_top": "the target's argmax",
                 "ngram_top": "the n-gram lookup's proposal"}
        for test, (hits, expected) in r["hits"].items():
            lines.append(f"{test}: the emitted token is {whose[test]} {hits:.0f} times, {expected:.1f} expected under "
                         f"the target (z = {r['z'][test]:+.2f})")
        lines.append("p-values: " + ", ".join(f"{k} {v:.2g}" for k, v in r["pvalues"].items()))
        if decide == "outside":
            return r["outside"] > 0, lines
        bound = alpha / max(len(r["pvalues"]), 1)
        return bool(r["pvalues"]) and min(r["pvalues"].values()) < bound, lines


def _described(s: dict) -> str:
    t = s["truncation"]
    parts = [f"T={s['temperature']:g}"] + [f"{k} {t[k]:g}" for k, off in (("top_k", 0), ("top_p", 1.0),
                                                                         ("min_p", 0.0)) if t.get(k, off) != off]
    return ", ".join(parts) + f" in the order {' > '.join(t.get('steps', []))}"


def _load(path: str, dtype: str):
    import torch
    from transformers import AutoModelForCausalLM

    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "auto": torch.float32}
    return AutoModelForCausalLM.from_pretrained(path, dtype=dtypes.get(dtype, torch.float32)).eval()


def _logits(model, prompt: list, out: list):
    import torch

    with torch.inference_mode():
        return model(torch.tensor([list(prompt) + list(out)])).logits[0, len(prompt) - 1:-1].float().numpy()


def sampling(case: dict, args) -> int:
    """Re-run every sampled batch with its seeds (``--recorded``: take case.json's emitted tokens instead), re-score
    each emitted token with the target (and the draft, for a draft model's tests) through transformers,
    teacher-forced, at the case's temperature and truncation, and recount what must hold when tokens come from the
    target (:class:`Recount`).  Exit 1 where it reproduces."""
    s, m = case["settings"], case["models"]
    tests = case.get("tests", DRAFT_TESTS)
    target = _load(m["target"], m["dtype"])
    draft = _load(m["draft"], m.get("draft_dtype", m["dtype"])) if any(t.startswith("draft_") for t in tests) \
        else None
    recount = Recount(s, tests, case.get("ngram"))
    for b, batch in enumerate(case["batches"]):
        if args.recorded:
            if "emitted" not in batch:
                raise CannotReplay("case.json records no emitted tokens per batch (a case written before --recorded)")
            outs = batch["emitted"]
        else:
            outs = run_batch(case, args, batch["prompts"], batch["seeds"], batch["max_new_tokens"], batch)
        for r, (prompt, out) in enumerate(zip(batch["prompts"], outs)):
            if args.show:
                print(f"batch {b} row {r}: {out}")
            if not out:
                continue
            row = recount.add(prompt, out, _logits(target, prompt, out),
                              _logits(draft, prompt, out) if draft is not None else None)
            for i in row["outside"]:
                print(f"batch {b} row {r} new token {i}: token {out[i]} is outside the truncation")
    decide = case.get("decide", "tests")
    reproduced, lines = recount.verdict(s["alpha"], decide)
    print("\n".join(lines))
    if decide == "outside":
        print("reproduced: a token outside the truncation was emitted" if reproduced else
              "not reproduced: every emitted token lies inside the truncation")
    elif reproduced:
        print(f"reproduced: p < {s['alpha'] / len(tests):.3g}: the tokens are not drawn from the target's "
              "distribution")
    else:
        print(f"not reproduced: every p-value >= {s['alpha'] / len(tests):.3g}")
    return 1 if reproduced else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", help="an in-process engine: another build of its type (REPORT.md names them: the "
                    "correct engine, or a self-test mutant by name)")
    ap.add_argument("--url", help="a server: replay against this address instead")
    ap.add_argument("--show", action="store_true", help="print every row's tokens")
    ap.add_argument("--recorded", action="store_true", help="a sampling case: recount the tokens case.json recorded, "
                    "without running the engine")
    args = ap.parse_args()
    case = json.loads((HERE / "case.json").read_text())
    try:
        return (sampling if case["check"] == "distribution" else equivalence)(case, args)
    except Unreadable as exc:  # neither reproduced nor not: the reply says nothing of the tokens
        print(f"unreadable: {exc}")
        return 3
    except CannotReplay as exc:
        print(f"cannot replay: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # the engine itself failed: say so, not a verdict
        print(f"could not run the {case['engine'].get('type')} engine: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
