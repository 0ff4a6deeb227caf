"""Test helpers: the demo config, and engines with scripted outputs and synthetic timings.

The fake engines stand in only where the point of a test is the bookkeeping
around engines (incremental writes, resume, adaptive repeats, caching), not
the engines themselves, which are tested on the real demo pair.
"""

from __future__ import annotations

import random

from gate.config import LoadedConfig, parse_config
from gate.engines.base import BatchResult, GenerationSettings, Request, SequenceResult, SpecCounters

DEMO_YAML = """\
version: 1
models:
  target: {path: "specguard:demo/target", dtype: %(dtype)s}
  draft: {path: "specguard:demo/draft", dtype: %(dtype)s}
  device: cpu
"""


def demo_config(dtype: str = "float32", extra: str = "") -> LoadedConfig:
    return parse_config(DEMO_YAML % {"dtype": dtype} + extra, "tests/demo.yaml")


class FakeEngine:
    """Emits ``(last prompt token + i) % 50 + 10`` and reports a scripted wall time."""

    max_batch_size = None

    def __init__(self, name: str, speculative: bool, wall=lambda n: 1.0, fail_after: int | None = None,
                 exc: type[BaseException] = KeyboardInterrupt):
        self.name = name
        self.speculative = speculative
        self.wall = wall
        self.calls = 0
        self.fail_after = fail_after
        self.exc = exc

    def generate(self, requests: list[Request], settings: GenerationSettings) -> BatchResult:
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise self.exc()
        self.calls += 1
        seqs = []
        for r in requests:
            toks = [(r.prompt_ids[-1] + i) % 50 + 10 for i in range(r.max_new_tokens)]
            c = None
            if self.speculative:
                c = SpecCounters(num_drafts=4, num_draft_tokens=16, num_accepted_tokens=8,
                                 num_accepted_tokens_per_pos=[4, 2, 1, 1], num_draft_tokens_per_pos=[4, 4, 4, 4],
                                 num_target_forwards=4, num_draft_forwards=16, num_emitted_tokens=len(toks))
            seqs.append(SequenceResult(toks, "max_tokens", wall_s=0.5, ttft_s=0.1, per_token_s=0.01, counters=c))
        return BatchResult(seqs, wall_s=self.wall(self.calls), realign_s=0.001, num_target_forwards=4,
                           peak_memory_bytes=1 << 20)


def noisy(ratio_median: float, spread: float, seed: int = 0):
    """Wall times whose ratio to 1.0 has the given median and multiplicative spread."""
    rng = random.Random(seed)
    return lambda n: 1.0 / (ratio_median * (1 + rng.uniform(-spread, spread)))


def constant(value: float):
    return lambda n: value

