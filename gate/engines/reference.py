"""The reference: the target model alone, batched, greedy or sampled.

Batch size 1 is the canonical reference every other output is compared with.
It shares the batch layout (:mod:`gate.engines.layout`) with the speculative
engine, so a speedup measured between the two compares algorithms, not
implementations of padding.  Its own correctness is checked against
``transformers``' ``generate`` on the user's own target at the start of every
run (:mod:`gate.run.anchor`), and on the architecture matrix in the tests.
"""

from __future__ import annotations

import torch

from gate.engines.base import BatchResult, Capabilities, GenerationSettings, Request
from gate.engines.clock import Clock, Stopwatch, peak_memory_bytes, reset_peak_memory
from gate.engines.layout import RaggedBatch, right_align
from gate.engines.sampling import RowRandom, probs, sample
from gate.engines.tracking import Tracker, shrink


class ReferenceEngine:
    name = "reference"
    speculative = False
    capabilities = Capabilities(steppable=True, counters="none", anchored_to_generate=True)

    def __init__(self, target: torch.nn.Module, device: torch.device):
        self.target = target
        self.device = device

    @torch.inference_mode()
    def generate(self, requests: list[Request], settings: GenerationSettings) -> BatchResult:
        clock = Clock(self.device)
        realign = Stopwatch(clock)
        reset_peak_memory(self.device)
        start = clock.now()
        tracker = Tracker(requests, settings, start, speculative=False)
        rnd = None if settings.greedy else RowRandom([r.seed for r in requests], self.device)
        batch = RaggedBatch(self.target, len(requests), self.device, realign)
        rows = list(range(len(requests)))  # batch row -> request index
        lag = {i: list(r.prompt_ids) for i, r in enumerate(requests)}  # tokens not yet in the cache

        while True:
            active = [j for j, r in enumerate(rows) if not tracker.done(r)]
            if not active:
                break
            ids, new_valid = right_align([lag.get(r, []) for r in rows], self.device)
            logits = batch.forward(ids, new_valid, logits_to_keep=1)[:, -1]
            if rnd is None:
                nxt = logits.argmax(-1)
            else:
                u = torch.zeros(len(rows), dtype=torch.float64, device=self.device)
                u[active] = rnd.uniform([rows[j] for j in active], 1)[:, 0]
                nxt = sample(probs(logits, settings), u)
            nxt = nxt.tolist()
            now = clock.now()
            lag = {}
            for j in active:
                r = rows[j]
                tracker.emit(r, [nxt[j]], now)
                if not tracker.done(r):
                    lag[r] = [nxt[j]]
            rows = shrink(rows, tracker, [batch])
            batch.compact()

        wall = clock.now() - start
        return BatchResult(tracker.results(), wall_s=wall, realign_s=realign.total,
                           num_target_forwards=batch.forwards,
                           peak_memory_bytes=peak_memory_bytes(self.device))
