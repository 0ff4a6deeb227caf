"""transformers' assisted generation (``generate(assistant_model=...)``) as an engine.

It is a second, independent implementation to check, and a speed anchor for the
gate's own engine.  transformers supports it at batch size 1 only, so the runner
runs it there and records larger batch sizes as skipped, with the reason.

For a fair comparison the assistant drafts a constant ``k`` tokens with no
confidence cut-off (``num_assistant_tokens_schedule="constant"``,
``assistant_confidence_threshold=0``); transformers' defaults stop drafts early.
Sampling disables top-k and top-p explicitly: left unset, the assistant path
falls back to top_k=50, and the distribution test rejects the output (it did,
which is how we found out).
Acceptance counts are read from the candidate generator's
``update_candidate_strategy(num_matches=...)`` calls; where a transformers
version lacks that hook, counters are reported as unavailable rather than guessed.

:class:`PromptLookupEngine` is the same generate() with prompt lookup decoding
(``prompt_lookup_num_tokens``): the n-gram lookup proposes from the context, no
draft model (``speculation.method: ngram``), an in-process method without a draft
model that the self-test and the suite can gate without a server.  Its candidates
come from the gate's own lookup (:class:`gate.engines.proposers.NgramLookup`, the
one the distribution check recomputes, with the same lengths), not transformers'
copy of it, which matches from its maximum n-gram size down to 1 only.

The engine shares its models with the other engines, so it leaves them as it
found them: the draft's generation config is swapped for a private copy only
for the duration of the call, the global RNG is forked, and the counting hook
on the target is removed afterwards.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager

import torch
from transformers import LogitsProcessor, LogitsProcessorList
from transformers.generation.candidate_generator import CandidateGenerator

from gate.engines.base import BatchResult, Capabilities, GenerationSettings, Request, SequenceResult, SpecCounters
from gate.engines.clock import Clock, peak_memory_bytes, reset_peak_memory
from gate.engines.proposers import NgramLookup
from gate.engines.sampling import truncate
from gate.engines.tracking import check_requests
from gate.errors import EngineError, Problem

HF_BATCH_LIMIT = "transformers' assisted generation supports batch size 1 only"


class _TokenClock:
    """A generate() streamer that only records when tokens arrive."""

    def __init__(self, clock: Clock):
        self.clock = clock
        self.times: list[tuple[float, int]] = []
        self._prompt_seen = False

    def put(self, value) -> None:
        if not self._prompt_seen:  # the first call carries the prompt
            self._prompt_seen = True
            return
        self.times.append((self.clock.now(), int(value.numel())))

    def end(self) -> None:
        pass


def _settings_in_config(gen) -> None:
    """transformers' candidate generator calls the assistant's generate() with a generation_config *and*
    generation settings as keyword arguments (min/max_new_tokens each step, use_cache from the target's
    model kwargs), which transformers itself warns is deprecated. Move those settings into the generator's
    own copy of the config instead: the config generate() would build from them, and no warning."""
    cfg, kwargs = getattr(gen, "generation_config", None), getattr(gen, "assistant_kwargs", None)
    prepare = getattr(gen, "_prepare_generation_args", None)
    if cfg is None or not isinstance(kwargs, dict) or prepare is None:
        return  # another transformers layout: leave it as it is
    settings = [k for k in kwargs if hasattr(cfg, k)]  # what generate() would treat as settings
    cfg.update(**{k: kwargs.pop(k) for k in settings})

    def prepare_args(input_ids, min_new_tokens, max_new_tokens):
        args = prepare(input_ids, min_new_tokens, max_new_tokens)
        if args.get("generation_config") is not None and {"min_new_tokens", "max_new_tokens"} <= set(args):
            step = copy.deepcopy(args["generation_config"])
            step.update(min_new_tokens=args.pop("min_new_tokens"), max_new_tokens=args.pop("max_new_tokens"))
            args["generation_config"] = step
        return args

    gen._prepare_generation_args = prepare_args


@contextmanager
def _count_matches(model, steps: list[tuple[int, int]], candidates=None):
    """Record (candidates, matches) per verification step by wrapping the candidate generator (``candidates``: a
    function of generate()'s arguments that builds the generator in transformers' place)."""
    original = getattr(model, "_get_candidate_generator", None)
    if original is None:
        if candidates is not None:
            raise EngineError(Problem("transformers", "generate() has no _get_candidate_generator here, so the gate's "
                                      "own candidates cannot replace transformers' (a layout it does not know)",
                                      hint="install a transformers version the gate supports (pyproject.toml)"))
        yield False
        return

    def wrapped(*args, **kwargs):
        gen = (candidates or original)(*args, **kwargs)
        inner = gen.update_candidate_strategy

        def update(input_ids, scores, num_matches):
            steps.append((int(scores.shape[1]) - 1, int(num_matches)))
            return inner(input_ids, scores, num_matches)

        gen.update_candidate_strategy = update
        _settings_in_config(gen)
        return gen

    model._get_candidate_generator = wrapped
    try:
        yield True
    finally:
        del model._get_candidate_generator


@contextmanager
def _swapped_generation_config(model, cfg):
    """The assistant reads its drafting schedule from its own generation config: lend it a copy."""
    original = model.generation_config
    model.generation_config = cfg
    try:
        yield
    finally:
        model.generation_config = original


class _Truncation(LogitsProcessor):
    """Temperature and truncation as gate/engines/sampling.py applies them (what the checks score against)."""

    def __init__(self, settings: GenerationSettings):
        self.settings = settings

    def __call__(self, input_ids, scores):
        s = self.settings
        return truncate(scores.float() / s.temperature, s.top_k, s.top_p, s.min_p, s.order).to(scores.dtype)


class HFAssistedEngine:
    name = "hf_assisted"
    speculative = True
    capabilities = Capabilities(max_batch_size=1, batch_limit_reason=HF_BATCH_LIMIT, steppable=True)

    def __init__(self, target: torch.nn.Module, draft: torch.nn.Module, device: torch.device, pad_token_id: int):
        self.target = target
        self.draft = draft
        self.device = device
        self.pad_token_id = pad_token_id

    @torch.inference_mode()
    def generate(self, requests: list[Request], settings: GenerationSettings) -> BatchResult:
        if len(requests) != 1:
            raise EngineError(Problem("engine 'hf_assisted'", f"got a batch of {len(requests)}: {HF_BATCH_LIMIT}"))
        check_requests(requests)
        req = requests[0]
        k = settings.num_draft_tokens
        gen_cfg = copy.deepcopy(self.target.generation_config)
        gen_cfg.update(
            max_new_tokens=req.max_new_tokens, min_new_tokens=None, do_sample=not settings.greedy,
            # [] when the run never stops early: None means "the model's own EOS" to generate().
            eos_token_id=list(settings.eos_token_ids), pad_token_id=self.pad_token_id,
            num_assistant_tokens=k, num_assistant_tokens_schedule="constant",
            assistant_confidence_threshold=0.0, repetition_penalty=None,
        )
        processors = None
        if not settings.greedy:
            # top_k=0 and top_p=1.0, not None: None means "use the default" (top_k=50) in the
            # assistant's copy of the config, which truncates the distribution.
            gen_cfg.update(temperature=settings.temperature, top_k=0, top_p=1.0, typical_p=1.0, min_p=None)
        if settings.truncated:  # the gate's truncation, in the config's order (generate()'s own has one order)
            gen_cfg.update(temperature=1.0)
            processors = LogitsProcessorList([_Truncation(settings)])
        ids = torch.tensor([list(req.prompt_ids)], device=self.device)
        clock = Clock(self.device)
        stream = _TokenClock(clock)
        steps: list[tuple[int, int]] = []
        reset_peak_memory(self.device)
        devices = [self.device] if self.device.type == "cuda" else []
        with self.proposer(gen_cfg, k), torch.random.fork_rng(devices=devices):
            if not settings.greedy:
                torch.manual_seed(req.seed)
            start = clock.now()
            with _count_matches(self.target, steps, self.candidates(k)) as counting:
                out = self.target.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                           generation_config=gen_cfg, streamer=stream, logits_processor=processors,
                                           **self.proposer_kwargs())
            wall = clock.now() - start
        tokens = out[0, ids.shape[1]:].tolist()
        eos = set(settings.eos_token_ids)
        stop = "eos" if tokens and tokens[-1] in eos else "max_tokens"
        first = stream.times[0][0] - start if stream.times else None
        last = stream.times[-1][0] - start if stream.times else wall
        per_token = (last - first) / (len(tokens) - 1) if first is not None and len(tokens) > 1 else None
        counters = self._counters(steps, len(tokens), k) if counting and steps else None
        seq = SequenceResult(tokens, stop, wall_s=last, ttft_s=first, per_token_s=per_token, counters=counters)
        return BatchResult([seq], wall_s=wall, num_target_forwards=len(steps),
                           num_draft_forwards=sum(c for c, _ in steps),
                           peak_memory_bytes=peak_memory_bytes(self.device))

    @contextmanager
    def proposer(self, gen_cfg, k: int):
        """The assistant drafts a constant k with no confidence cut-off, from a private copy of its config."""
        assistant_cfg = copy.deepcopy(self.draft.generation_config)
        assistant_cfg.update(num_assistant_tokens=k, num_assistant_tokens_schedule="constant",
                             assistant_confidence_threshold=0.0)
        with _swapped_generation_config(self.draft, assistant_cfg):
            yield

    def proposer_kwargs(self) -> dict:
        return {"assistant_model": self.draft}

    def candidates(self, k: int):
        """What builds the candidate generator in transformers' place (None: transformers' own)."""
        return None

    @staticmethod
    def _counters(steps: list[tuple[int, int]], emitted: int, k: int) -> SpecCounters:
        c = SpecCounters(num_accepted_tokens_per_pos=[0] * k, num_draft_tokens_per_pos=[0] * k)
        budget = emitted  # tokens cut by max_new_tokens/EOS do not count as accepted
        for candidates, matches in steps:
            step_emitted = max(0, min(matches + 1, budget))
            c.observe_step(candidates, matches, step_emitted, draft_forwards=candidates)
            budget -= step_emitted
        return c


class _LookupCandidates(CandidateGenerator):
    """transformers' candidate generator interface over the gate's n-gram lookup: up to k candidates, never past the
    token budget (the target adds one token of its own per step)."""

    def __init__(self, lookup: NgramLookup, k: int, max_length: int):
        self.lookup, self.k, self.max_length = lookup, k, max_length

    def get_candidates(self, input_ids: torch.LongTensor, **kwargs):
        room = min(self.k, self.max_length - input_ids.shape[1] - 1)
        found = self.lookup.propose(input_ids[0].tolist(), room) if room > 0 else []
        if not found:
            return input_ids, None  # no candidates: the step decodes one token, as plain decoding does
        return torch.cat([input_ids, torch.tensor([found], dtype=input_ids.dtype, device=input_ids.device)], 1), None

    def update_candidate_strategy(self, input_ids, scores, num_matches):
        pass


class PromptLookupEngine(HFAssistedEngine):
    """Prompt lookup decoding: up to k tokens that followed the latest n-gram's earliest earlier occurrence in the
    context (n from the lookup's maximum down to its minimum), verified by the target in transformers' generate();
    batch size 1 only."""

    name = "prompt_lookup"
    # no draft model: nothing of the pair's step costs applies (no calibration, no Leviathan expectation)
    capabilities = Capabilities(max_batch_size=1, batch_limit_reason=HF_BATCH_LIMIT, steppable=False)

    def __init__(self, target: torch.nn.Module, device: torch.device, pad_token_id: int,
                 lookup: NgramLookup | None = None):
        super().__init__(target, None, device, pad_token_id)
        self.lookup = lookup or NgramLookup()

    @contextmanager
    def proposer(self, gen_cfg, k: int):
        gen_cfg.update(prompt_lookup_num_tokens=k)  # the assisted path; the candidates are the lookup's (below)
        yield

    def proposer_kwargs(self) -> dict:
        return {}

    def candidates(self, k: int):
        def build(*args, **kwargs):
            config = kwargs["generation_config"] if "generation_config" in kwargs else args[0]
            return _LookupCandidates(self.lookup, k, config.max_length)

        return build
