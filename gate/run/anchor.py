"""The anchor: the gate's own reference checked against ``transformers``' ``generate()`` on the user's target.

Every verdict rests on the reference (:mod:`gate.engines.reference`), the gate's
own ragged implementation: one KV cache, a hand-built mask, explicit positions.
If that were wrong for some architecture in a way the speculative engine shares,
the gate would compare two wrong outputs and could pass.  So before anything
else, each run decodes a few suite prompts both ways, greedy, at batch size 1, in
the configured dtype and device:

* the gate's reference, exactly as the run uses it (same settings, same EOS ids);
* ``model.generate()`` with a clean greedy configuration (no repetition penalty
  or other processor from the model's ``generation_config``).

A difference is judged by the same near-tie rule as every other comparison
(:mod:`gate.engines.tolerance`): at the first differing position, the gap between
the two tokens' teacher-forced logits against the tolerance, with the noise
measured on these prompts (alone vs in a padded batch).  Near-ties are counted
and reported; a confident difference stops the run with exit 2, before any
verdict, because the gate cannot trust its reference for this model.

The result is cached by everything the reference depends on (target fingerprint,
dtype, device, hardware, library versions, attention implementation, engine
version, the prompts and settings) and never by the draft, so a draft-only PR
pays nothing.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

import torch

from gate.engines.base import Engine, GenerationSettings, Request
from gate.engines.scoring import Scorer
from gate.engines.tolerance import measure_noise, tolerance_for
from gate.errors import AnchorError, Problem
from gate.inputs import fingerprint as fp
from gate.inputs.models import ModelPair
from gate.io.files import atomic_write_json
from gate.run.plan import PromptInfo
from gate.run.results import AnchorDifference, AnchorRecord

NUM_PROMPTS = 3





def pick_prompts(prompts: list[PromptInfo], n: int = NUM_PROMPTS) -> list[PromptInfo]:
    """The longest, the shortest and a middle prompt: long ones cross sliding windows, short ones don't."""
    by_len = sorted(prompts, key=lambda p: (len(p.prompt_ids), p.index))
    order = [by_len[-1], by_len[0], by_len[len(by_len) // 2]] + by_len[::-1]
    picked: dict[str, PromptInfo] = {}
    for p in order:
        if len(picked) == n:
            break
        picked.setdefault(p.id, p)
    return list(picked.values())


def generate_greedy(model: torch.nn.Module, prompt_ids: tuple[int, ...], max_new_tokens: int,
                    eos: tuple[int, ...], pad_token_id: int, device: torch.device) -> list[int]:
    """``model.generate()``, greedy, batch size 1, with nothing from the model's generation_config that
    would change the argmax (penalties, minimum lengths, suppressed tokens)."""
    from transformers import GenerationConfig

    # eos_token_id=[] when the run never stops early: None would mean "the model's own EOS" to generate().
    cfg = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, num_beams=1,
                           eos_token_id=list(eos), pad_token_id=pad_token_id)
    neutral = dict(repetition_penalty=1.0, no_repeat_ngram_size=0, min_new_tokens=0,
                   suppress_tokens=[], begin_suppress_tokens=[])
    cfg.update(**neutral)
    ids = torch.tensor([list(prompt_ids)], device=device)
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=cfg)
    tokens = out[0, ids.shape[1]:].tolist()
    for i, t in enumerate(tokens):  # generate() stops at EOS; cut there in case a version pads after it
        if t in eos:
            return tokens[:i + 1]
    return tokens


def _first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def anchor_key(context: dict, picked: list[PromptInfo], settings: GenerationSettings) -> str:
    return fp.digest({"context": context, "eos": list(settings.eos_token_ids),
                      "prompts": [[list(p.prompt_ids), p.max_new_tokens] for p in picked]})


class Anchor:
    """Runs (or reuses) the anchor for one run's target and reference."""

    def __init__(self, pair: ModelPair, reference: Engine, cache_root: Path | None, fixed_tolerance: float | None,
                 noise_batch_size: int = 2):
        self.pair = pair
        self.reference = reference
        self.cache_dir = Path(cache_root) / "anchor" if cache_root is not None else None
        self.fixed = fixed_tolerance
        self.noise_batch_size = max(2, noise_batch_size)

    def _cached(self, key: str) -> AnchorRecord | None:
        if self.cache_dir is None:
            return None
        try:
            return AnchorRecord.model_validate(json.loads((self.cache_dir / f"{key}.json").read_text("utf-8")))
        except (OSError, ValueError):
            return None

    def run(self, prompts: list[PromptInfo], settings: GenerationSettings, context: dict) -> AnchorRecord:
        picked = pick_prompts(prompts)
        key = anchor_key(context, picked, settings)
        hit = self._cached(key)
        if hit is not None:
            return hit.model_copy(update={"cached": True, "seconds": 0.0})
        started = time.perf_counter()
        greedy = GenerationSettings(0.0, settings.num_draft_tokens, settings.eos_token_ids)
        target = self.pair.target.model
        pad = self.pair.tokenizer.pad_token_id
        pad = pad if pad is not None else (greedy.eos_token_ids[0] if greedy.eos_token_ids else 0)
        outputs = []
        for p in picked:
            ours = self.reference.generate([Request(p.prompt_ids, p.max_new_tokens, prompt_id=p.id)],
                                           greedy).sequences[0].token_ids
            theirs = generate_greedy(target, p.prompt_ids, p.max_new_tokens, greedy.eos_token_ids, pad,
                                     self.pair.device)
            outputs.append((p, list(ours), theirs))
        differences = self._judge([o for o in outputs if o[1] != o[2]], [(p.prompt_ids, tuple(o))
                                                                        for p, o, _ in outputs])
        record = AnchorRecord(key=key, prompts=len(outputs), identical=sum(o[1] == o[2] for o in outputs),
                              near_ties=sum(d.near_tie for d in differences), differences=differences,
                              model_type=str(getattr(target.config, "model_type", "?")),
                              seconds=time.perf_counter() - started)
        confident = [d for d in differences if not d.near_tie]
        if confident:
            raise AnchorError(self._problem(record, confident[0]))
        if self.cache_dir is not None:
            with contextlib.suppress(OSError):  # a read-only disk only costs the saving
                atomic_write_json(self.cache_dir / f"{key}.json", record)
        return record

    def _judge(self, differing: list[tuple], items: list[tuple]) -> list[AnchorDifference]:
        """Each differing prompt's first difference, with its logit gap against the near-tie tolerance."""
        if not differing:
            return []
        scorer = Scorer(self.pair.target.model, self.pair.device)
        noise = None if self.fixed is not None else measure_noise(scorer, items, self.noise_batch_size)
        tol = tolerance_for(self.pair.target.dtype, noise, self.fixed)
        out = []
        for p, ours, theirs in differing:
            j = _first_difference(ours, theirs)
            mine = ours[j] if j < len(ours) else None
            other = theirs[j] if j < len(theirs) else None
            gap = limit = None
            if mine is not None and other is not None:
                [row] = scorer.logits_rows([(tuple(p.prompt_ids), tuple(ours[:j + 1]))], lambda _, r, j=j: r[j])
                gap = float(row[mine] - row[other])
                limit = tol.at(float(row.max()))
            out.append(AnchorDifference(prompt_id=p.id, position=j, reference_token=mine, generate_token=other,
                                        logit_gap=gap, tolerance=limit,
                                        near_tie=gap is not None and abs(gap) <= limit))
        return out

    def _problem(self, record: AnchorRecord, d: AnchorDifference) -> Problem:
        from gate.inputs.architectures import WORKS_INSTEAD, describe

        arch = describe(self.pair.target.model.config)
        what = (f"at output position {d.position} the gate's reference chose token {d.reference_token} and "
                f"generate() chose {d.generate_token}, {abs(d.logit_gap):.3g} logits apart (near-tie tolerance "
                f"{d.tolerance:.3g})" if d.logit_gap is not None else
                f"the outputs have different lengths from output position {d.position} "
                f"(reference {d.reference_token}, generate() {d.generate_token}: one stopped at EOS)")
        return Problem(f"target {self.pair.target.location!r}",
                       f"the gate's reference disagrees with transformers.generate() on this {arch} model "
                       f"({record.identical}/{record.prompts} anchor prompts identical); on prompt {d.prompt_id!r} "
                       f"{what}. The gate cannot trust its reference for this model, so it gives no verdict",
                       field="models.target.path",
                       hint="every engine is judged against this reference (speculative, hf_assisted and plug-ins "
                            f"alike), so none can be gated in process on this model: {WORKS_INSTEAD}; and please "
                            "report the architecture (docs/engines.md lists the ones checked)")
