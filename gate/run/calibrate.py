"""Calibration: the step costs of the loaded pair that the speedup model needs.

At each batch size (context 64 tokens), interleaved across models, the median
time of one target decode step, one draft decode step, and one target step over
``k + 1`` tokens (a verification).  ``cost_ratio`` is c of the Leviathan et al.
model: one draft step over one target step.  ``verify_ratio`` is one
verification over one target decode step: the model assumes 1, and where it is
not (compute-bound batches) speculation pays less.

This measures the *pair*, so it applies only to engines that run the pair's
own steps (``Capabilities.steppable``).  For others, such as plug-ins, the
expectation is reported as not measured rather than borrowed.
"""

from __future__ import annotations

import torch

from gate.engines.clock import Clock, Stopwatch
from gate.engines.layout import RaggedBatch, right_align
from gate.inputs.models import ModelPair


def calibrate(pair: ModelPair, batch_sizes: list[int], num_draft_tokens: int, warmup: int = 5,
              trials: int = 30) -> dict[str, dict[str, float]]:
    out = {}
    if pair.draft is None or pair.draft.model is None:  # a method without a draft model: no draft step to time
        return out
    clock = Clock(pair.device)
    width = num_draft_tokens + 1
    dev = pair.device
    for b in batch_sizes:
        steps = {}
        with torch.inference_mode():
            for role, m in (("target", pair.target.model), ("draft", pair.draft.model)):
                batch = RaggedBatch(m, b, dev, Stopwatch(clock))
                ids, valid = right_align([[5] * 64] * b, dev)
                batch.forward(ids, valid, logits_to_keep=1)
                steps[role] = batch
            probes = {
                "target_step_s": (steps["target"], 1), "draft_step_s": (steps["draft"], 1),
                "target_verify_s": (steps["target"], width),
            }
            times: dict[str, list[float]] = {k: [] for k in probes}
            for i in range(warmup + trials):
                for name, (batch, w) in probes.items():
                    ids = torch.full((b, w), 7, device=dev)
                    ok = torch.ones((b, w), dtype=torch.bool, device=dev)
                    start = batch.length
                    t0 = clock.now()
                    batch.forward(ids, ok, logits_to_keep=w)
                    elapsed = clock.now() - t0
                    batch.rollback(start, torch.zeros(b, dtype=torch.long, device=dev))  # fixed context
                    if i >= warmup:
                        times[name].append(elapsed)
        row = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
        row["cost_ratio"] = row["draft_step_s"] / row["target_step_s"]
        row["verify_ratio"] = row["target_verify_s"] / row["target_step_s"]
        out[str(b)] = row
    return out
