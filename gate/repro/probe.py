"""Does a greedy batch still fail?  The engine under test is run on a case, the reference gives each prompt's expected
tokens, and the target re-scores the engine's output exactly as the equivalence check does
(:func:`gate.checks.equivalence.analyze_sequence`, with the tolerance the check used for that engine).

A row fails when the check would call it a bug: a confident divergence from the reference, a token clearly below
the target's argmax given the engine's own prefix, or a corruption signature.  Where the engine has its own plain
decoding (a plug-in's ``engines[].reference``), that decoding is run on the same case, and what the engine shares
with it is its stack's, not a failure, as in the check."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gate.checks.equivalence import analyze_sequence, first_divergence, score_outputs
from gate.engines.base import EngineFailure, GenerationSettings, Request
from gate.engines.scoring import Scorer
from gate.engines.tolerance import Tolerance
from gate.repro.shrink import Case


@dataclass(frozen=True)
class Finding:
    """The first failure in a case: which row, where, and what the target says about it."""

    row: int
    position: int  # 0-based, in the row's new tokens
    kind: str  # "confident divergence", "token below the target's argmax", "signature: <name>"
    expected: tuple[int, ...]  # the reference's tokens for the row's prompt
    actual: tuple[int, ...]  # the engine's
    gap: float | None  # logit of the target's preferred token minus the emitted one's (nats)
    tolerance: float | None
    argmax: int | None  # the target's preferred token there
    detail: str

    def to_dict(self) -> dict:
        return {"row": self.row, "position": self.position, "kind": self.kind, "expected": list(self.expected),
                "actual": list(self.actual), "gap": self.gap, "tolerance": self.tolerance, "argmax": self.argmax,
                "detail": self.detail}


class EquivalenceProbe:
    """``probe(case)``: run ``engine`` on the case once; the first failing row's :class:`Finding`, or None."""

    def __init__(self, engine, reference, scorer: Scorer, tolerance: Tolerance, settings: GenerationSettings,
                 plain=None, seed: int = 0):
        self.engine, self.reference, self.plain = engine, reference, plain
        self.scorer, self.tolerance, self.settings, self.seed = scorer, tolerance, settings, seed
        self._expected: dict[tuple[tuple[int, ...], int], tuple[int, ...]] = {}

    def requests(self, case: Case) -> list[Request]:
        return [Request(p, case.max_new_tokens, self.seed, name) for p, name in zip(case.prompts, case.names)]

    def outputs(self, engine, case: Case) -> list[list[int]]:
        result = engine.generate(self.requests(case), self.settings)
        return [list(s.token_ids) for s in result.sequences]

    def expected(self, prompt: tuple[int, ...], max_new: int) -> tuple[int, ...]:
        """The reference's greedy tokens for one prompt alone (batch size 1, as the canonical reference runs)."""
        key = (prompt, max_new)
        if key not in self._expected:
            only = Case((prompt,), ("",), max_new)
            self._expected[key] = tuple(self.outputs(self.reference, only)[0])
        return self._expected[key]

    def __call__(self, case: Case) -> Finding | None:
        try:
            outs = self.outputs(self.engine, case)
            plain = self.outputs(self.plain, case) if self.plain is not None else None
        except EngineFailure:  # a crash, a timeout or a broken contract on this candidate: not the failure shrunk
            return None
        refs = [self.expected(p, case.max_new_tokens) for p in case.prompts]
        items, others = [], []
        for prompt, out, ref in zip(case.prompts, outs, refs):
            j = first_divergence(out, list(ref))
            items.append((prompt, tuple(out)))
            others.append((j, ref[j]) if j is not None and j < len(out) and j < len(ref) else None)
        scored = score_outputs(self.scorer, items, others)
        eos = set(self.settings.eos_token_ids)
        for row, (name, out, ref, sc) in enumerate(zip(case.names, outs, refs, scored)):
            v = analyze_sequence(name, "", out, list(ref), sc, self.tolerance, eos, case.max_new_tokens,
                                 "eos" if out and out[-1] in eos else "max_tokens",
                                 plain=[plain[row]] if plain is not None else None)
            found = _first(v, row, out, ref)
            if found is not None:
                return found
        return None

    @torch.inference_mode()
    def rank(self, prompt: tuple[int, ...], actual: tuple[int, ...], position: int) -> int | None:
        """The rank of the emitted token among the target's logits at ``position`` (1: its argmax), given the
        engine's own prefix."""
        if position >= len(actual):
            return None
        tok = actual[position]
        got = self.scorer.logits_rows([(prompt, actual[:position + 1])],
                                      lambda _, rows: int((rows[position] > rows[position, tok]).sum()) + 1)
        return got[0]


def _first(v, row: int, out: list[int], ref: tuple[int, ...]) -> Finding | None:
    """The earliest finding of a sequence verdict that the equivalence check fails on."""
    candidates = []
    d = v.divergence
    if d is not None and d.kind == "confident":
        candidates.append(Finding(row, d.position, "confident divergence", ref, tuple(out), d.gap, d.tolerance,
                                  d.reference_token, f"the engine emitted token {d.token} where the reference "
                                  f"emitted {d.reference_token}, {d.gap:.3g} nats apart under the target "
                                  f"(tolerance {d.tolerance:.3g})"))
    for bad in v.inconsistent[:1]:
        candidates.append(Finding(row, bad["position"], "token below the target's argmax", ref, tuple(out),
                                  bad["gap"], bad["tolerance"], bad["argmax"],
                                  f"token {bad['token']} is {bad['gap']:.3g} nats below the target's argmax "
                                  f"{bad['argmax']} given the engine's own prefix (tolerance {bad['tolerance']:.3g})"))
    for sig in v.signatures[:1]:
        at = sig.get("position", d.position if d is not None else max(len(out) - 1, 0))
        candidates.append(Finding(row, at, f"signature: {sig['name']}", ref, tuple(out), None, None, None,
                                  sig["detail"]))
    return min(candidates, key=lambda f: f.position) if candidates else None


__all__ = ["EquivalenceProbe", "Finding"]
