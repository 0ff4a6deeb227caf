"""What every check gets: the results, the loaded pair, the config, and work shared between checks.

Re-scoring is the expensive part of the analysis, and equivalence and the noise
floor ask the same questions of mostly identical outputs.  The context scores
every greedy output once (identical outputs share one forward pass) and hands
each check the per-sequence verdicts it needs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gate.checks.equivalence import SequenceVerdict, analyze_sequence, first_divergence, score_outputs
from gate.checks.scoring import Scorer
from gate.checks.tolerance import Tolerance, measure_noise, tolerance_for
from gate.config import REFERENCE, Config
from gate.models import ModelPair
from gate.results import Results, SequenceOutput
from gate.verdict import Verdict

NOISE_SAMPLE = 16  # sequences re-scored alone and batched to measure logit noise


@dataclass
class Compared:
    """One greedy output compared with the canonical reference."""

    composition: int
    output: SequenceOutput
    verdict: SequenceVerdict


class CheckContext:
    def __init__(self, results: Results, pair: ModelPair, config: Config,
                 say: Callable[[str], None] = lambda m: None):
        self.results = results
        self.pair = pair
        self.config = config
        self.say = say
        self.scorer = Scorer(pair.target.model, pair.device)
        self.canonical = results.canonical()
        self._tolerance: Tolerance | None = None
        self._compared: dict[tuple[str, int], list[Compared]] | None = None

    @property
    def tolerance(self) -> Tolerance:
        """Fixed by the config, or measured on this run's own canonical outputs."""
        if self._tolerance is None:
            eq = self.config.checks.equivalence
            fixed = None if eq.logit_tolerance == "auto" else float(eq.logit_tolerance)
            noise = None
            if fixed is None and self.canonical:
                sample = [(tuple(self.results.prompt(pid).prompt_ids), tuple(s.token_ids))
                          for pid, s in self.canonical.items()]
                sample = sample[:: max(1, len(sample) // NOISE_SAMPLE)][:NOISE_SAMPLE]
                noise = measure_noise(self.scorer, sample, max(self.config.batching.batch_sizes))
            self._tolerance = tolerance_for(self.pair.target.dtype, noise, fixed)
            self.say(f"tolerance: {self._tolerance.to_dict()['rule']}; measured logit noise {noise}")
        return self._tolerance

    def compared(self, engine: str, batch_size: int) -> list[Compared]:
        """Every greedy output of an engine at a batch size (all compositions), judged against the canonical."""
        if self._compared is None:
            self._compared = self._compare_all()
        return self._compared.get((engine, batch_size), [])

    def compared_keys(self) -> list[tuple[str, int]]:
        if self._compared is None:
            self._compared = self._compare_all()
        return list(self._compared)

    def _compare_all(self) -> dict[tuple[str, int], list[Compared]]:
        res = self.results
        groups: list[tuple[str, int, int, str, SequenceOutput]] = []
        for engine in [REFERENCE, *res.engines()]:
            for bs in res.greedy_batch_sizes(engine):
                if engine == REFERENCE and bs == 1:
                    continue  # the canonical reference is not compared with itself
                for comp in res.compositions(engine, bs) or [0]:
                    for pid, seq in res.greedy_outputs(engine, bs, comp).items():
                        if pid in self.canonical:
                            groups.append((engine, bs, comp, pid, seq))
        items, others = [], []
        for _, _, _, pid, seq in groups:
            out, ref = seq.token_ids, self.canonical[pid].token_ids
            j = first_divergence(out, ref)
            items.append((tuple(res.prompt(pid).prompt_ids), tuple(out)))
            others.append((j, ref[j]) if j is not None and j < len(out) and j < len(ref) else None)
        scored = score_outputs(self.scorer, items, others) if items else []
        eos = set(res.settings.eos_token_ids)
        tol = self.tolerance
        out: dict[tuple[str, int], list[Compared]] = {}
        for (engine, bs, comp, pid, seq), sc in zip(groups, scored):
            p = res.prompt(pid)
            v = analyze_sequence(pid, p.slice, seq.token_ids, self.canonical[pid].token_ids, sc, tol, eos,
                                 p.max_new_tokens, seq.stop_reason)
            out.setdefault((engine, bs), []).append(Compared(comp, seq, v))
        return out


__all__ = ["CheckContext", "Compared", "Verdict"]
