"""What every check gets: the results, the loaded pair, the config, and work shared between checks.

Re-scoring is the expensive part of the analysis, and equivalence and the noise
floor ask the same questions of mostly identical outputs.  The context scores
every greedy output once (identical outputs share one forward pass) and hands
each check the per-sequence verdicts it needs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from gate.checks import stack_noise as stack
from gate.checks.doc import RETOKENIZED_METHOD, StackNoise
from gate.checks.equivalence import SequenceVerdict, analyze_sequence, first_divergence, score_outputs
from gate.checks.stack_noise import Departures
from gate.engines.scoring import Scorer
from gate.engines.tolerance import Tolerance, measure_noise, tolerance_for
from gate.inputs.config import REFERENCE, Config
from gate.inputs.models import ModelPair
from gate.run.records import SequenceOutput
from gate.run.results import Results

NOISE_SAMPLE = 16  # sequences re-scored alone and batched to measure logit noise
SERVER_NOISE_FACTOR = 4.0  # as NOISE_FACTOR for local re-scoring: two candidates, each moved by the noise, x2
SERVER_FLOOR = 1e-3  # nats: servers round logprobs; no gap finer than this is taken as a confident choice
TEXT_METHOD = "text comparison"  # no logprobs and no local target: divergences are unclassified


def _top2_gap(top: dict) -> float | None:
    vals = sorted(top.values(), reverse=True)
    return vals[0] - vals[1] if len(vals) > 1 else None


def _tops(seq: SequenceOutput) -> tuple[list, list[dict]] | None:
    """A server's per-token keys and top-k: by id, or (a text-only stack) by the token's text; None: not given."""
    if seq.top_logprobs:
        return seq.token_ids, seq.top_logprobs
    if seq.token_texts and seq.top_text_logprobs:
        return seq.token_texts, seq.top_text_logprobs
    return None


def text_divergence_gap(ref: SequenceOutput, text: str, tolerance: float,
                        boundaries: Callable[[str], list[int] | None]) -> tuple[float, float] | None:
    """(gap, tolerance) where a text-only engine's ``text`` first departs from the reference, from the reference's
    top-k keyed by text (OpenAI's legacy ``logprobs``); None when that cannot be told (unclassified).

    The reference token covering the first differing character is found from the reference's own token texts; the
    engine's text from that token's start must begin with one of the top-k texts (then the gap is the logprob of
    the reference's token minus that one's), or with none (then the top-k's lowest logprob bounds the gap, which
    proves a confident divergence when it exceeds the tolerance, never a near-tie).  ``boundaries(text)`` gives the
    character offsets where the engine's text splits into tokens (its re-tokenization): a divergence that starts
    inside one of its tokens was decided under another prefix, so it is left unclassified."""
    pieces, tops = ref.token_texts, ref.top_text_logprobs
    if not pieces or not tops or len(pieces) != len(tops) or "".join(pieces) != ref.text:
        return None
    c = next((i for i, (a, b) in enumerate(zip(text, ref.text)) if a != b), None)
    if c is None:
        return None  # one text is a prefix of the other: a length difference, not a choice between tokens
    t, offset = 0, 0
    while offset + len(pieces[t]) <= c:  # the reference token that covers character c
        offset += len(pieces[t])
        t += 1
    top, mine = tops[t], pieces[t]
    cuts = boundaries(text)
    if mine not in top or cuts is None or offset not in cuts:
        return None
    rest = text[offset:]
    candidates = [k for k in top if k and k != mine and rest.startswith(k)]
    if candidates:
        return min((top[mine] - top[k] for k in candidates), key=abs), tolerance
    bound = top[mine] - min(top.values())
    return (bound, tolerance) if bound > tolerance else None


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
        # Engines (the reference included) that gave text, not token ids: their ids are that text re-tokenized
        # here, which need not be the ids generated, so no token of them may be re-scored or judged by count.
        self.retokenized = sorted({ex.engine for ex in results.executions for s in ex.sequences if s.text_only})
        self.local = pair.target.model is not None and not self.retokenized  # a local target to re-score with
        self.scorer = Scorer(pair.target.model, pair.device) if self.local else None
        self.scorers = [self.scorer] if self.scorer else []  # every scorer a check used, for the time re-scoring
        self.canonical = results.canonical()
        if self.retokenized:
            self.canonical = {pid: self._as_text(s) for pid, s in self.canonical.items()}
        self._tolerance: Tolerance | None = None
        self._compared: dict[tuple[str, int], list[Compared]] | None = None
        # engines of another stack -> the engine whose outputs are their own plain decoding (None: none); their
        # noise is measured on it where the target is re-scored here (gate.checks.stack_noise)
        self.stacks = results.other_stacks() if self.local else {}
        self.own_references = set(results.own_references().values())  # plain decodings, never engines under test
        self.tolerances: dict[str, Tolerance] = {}  # per engine, where it is not the gate's own (self.tolerance)
        self.stack_noise: dict[str, StackNoise] = {}
        self.plain_departures: dict[str, Departures] = {}

    def _as_text(self, seq: SequenceOutput) -> SequenceOutput:
        """An output's text tokenized here, as a text-only stack's was, so that equal texts compare equal."""
        return seq.model_copy(update={"token_ids": self.pair.encode(seq.text), "top_logprobs": None})

    def scorer_for(self, model) -> Scorer:
        s = Scorer(model, self.pair.device)
        self.scorers.append(s)
        return s

    @property
    def rescoring_s(self) -> float:
        return sum(s.seconds for s in self.scorers)

    @property
    def method(self) -> str:
        """How divergences are told apart: re-scoring locally, a server's logprobs, or not at all."""
        if self.retokenized:
            how = ("a divergence is classified from the reference's top-k keyed by text where it gave one; the rest "
                   "are judged against the reference's own noise floor" if self._text_tops() else
                   "bugs cannot be told from noise token by token: divergences are judged against the reference's "
                   "own noise floor")
            return (f"{RETOKENIZED_METHOD}: {', '.join(self.retokenized)} gave text, not token ids, so texts are "
                    f"compared; {how} (local_weights not used for equivalence)")
        if self.local:
            return "local re-scoring"
        if any(s.top_logprobs for s in self.canonical.values()):
            return "server logprobs"
        return f"{TEXT_METHOD}: cannot tell bugs from noise on this stack (it gives no logprobs)"

    @property
    def tolerance(self) -> Tolerance:
        """Fixed by the config, or measured on this run's own canonical outputs."""
        if self._tolerance is None:
            eq = self.config.checks.equivalence
            fixed = None if eq.logit_tolerance == "auto" else float(eq.logit_tolerance)
            noise = None
            if fixed is None and not self.local:
                noise = self._server_noise()
                fixed = max(SERVER_NOISE_FACTOR * noise, SERVER_FLOOR) if noise is not None else SERVER_FLOOR
                self._tolerance = dataclasses.replace(tolerance_for(self.pair.target.dtype, noise, fixed),
                                                      source="server")
                self.say(f"tolerance from the reference server's logprobs: {fixed:.3g} (measured noise {noise})")
                return self._tolerance
            if fixed is None and self.canonical:
                sample = [(tuple(self.results.prompt(pid).prompt_ids), tuple(s.token_ids))
                          for pid, s in self.canonical.items()]
                sample = sample[:: max(1, len(sample) // NOISE_SAMPLE)][:NOISE_SAMPLE]
                noise = measure_noise(self.scorer, sample, self.config.noise_batch_size)
            self._tolerance = tolerance_for(self.pair.target.dtype, noise, fixed)
            self.say(f"tolerance: {self._tolerance.to_dict()['rule']}; measured logit noise {noise}")
        return self._tolerance

    def _text_tops(self) -> bool:
        return any(s.top_text_logprobs for s in self.canonical.values())

    def _server_noise(self) -> float | None:
        """Largest change of the top-2 logprob gap between the reference server's answers to the same prompts
        sent alone (batch size 1) and at the highest concurrency, over the tokens both agree on (top-k keyed by id,
        or by text from a text-only stack)."""
        sizes = [bs for bs in self.results.greedy_batch_sizes(REFERENCE) if bs > 1]
        if not sizes:
            return None
        busy = self.results.greedy_outputs(REFERENCE, max(sizes), None)
        worst = None
        for pid, alone in self.canonical.items():
            other = busy.get(pid)
            mine, theirs = _tops(alone), (_tops(other) if other is not None else None)
            if mine is None or theirs is None:
                continue
            for t, (a, b) in enumerate(zip(mine[1], theirs[1])):
                if t >= len(mine[0]) or t >= len(theirs[0]) or mine[0][t] != theirs[0][t]:
                    break
                ga, gb = _top2_gap(a), _top2_gap(b)
                if ga is not None and gb is not None:
                    worst = max(worst or 0.0, abs(ga - gb))
        return worst

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
        text = bool(self.retokenized)
        if text:  # compare texts: both sides tokenized the same way here, whichever of them gave ids
            groups = [(e, bs, comp, pid, self._as_text(seq)) for e, bs, comp, pid, seq in groups]
        canonical = {pid: s.token_ids for pid, s in self.canonical.items()}
        items, others = [], []
        for _, _, _, pid, seq in groups:
            out, ref = seq.token_ids, canonical[pid]
            j = first_divergence(out, ref)
            items.append((tuple(res.prompt(pid).prompt_ids), tuple(out)))
            others.append((j, ref[j]) if j is not None and j < len(out) and j < len(ref) else None)
        plains = {p for p in self.stacks.values() if p is not None}
        # A served reference is a stack's plain decoding too: its canonical outputs are re-scored for its noise.
        served = [(tuple(res.prompt(pid).prompt_ids), tuple(ids)) for pid, ids in canonical.items()] \
            if REFERENCE in plains else []
        if self.local:
            scored = score_outputs(self.scorer, items + served, others + [None] * len(served)) \
                if items or served else []
            scored, served_scored = scored[:len(items)], scored[len(items):]
        else:
            scored, served_scored = [None] * len(groups), []
        eos = set(res.settings.eos_token_ids)
        tol = self.tolerance
        if self.stacks:
            self._measure_stacks(groups, scored, served_scored)
        plain_outputs: dict[str, dict[str, list[list[int]]]] = {p: {} for p in plains}
        for engine, _, _, pid, seq in groups:
            if engine in plain_outputs:
                plain_outputs[engine].setdefault(pid, []).append(seq.token_ids)
        if REFERENCE in plain_outputs:
            for pid, ids in canonical.items():
                plain_outputs[REFERENCE].setdefault(pid, []).append(ids)
        out: dict[tuple[str, int], list[Compared]] = {}
        for (engine, bs, comp, pid, seq), sc, other in zip(groups, scored, others):
            p = res.prompt(pid)
            server_gap = None
            if not self.local and not text and other is not None:
                server_gap = self._gap_from_reference(pid, other[0], seq.token_ids[other[0]])
            elif text and other is not None:
                server_gap = text_divergence_gap(self.canonical[pid], seq.text, tol.fixed, self._cuts)
            own = self.stacks.get(engine)
            v = analyze_sequence(pid, p.slice, seq.token_ids, canonical[pid], sc, self.tolerances.get(engine, tol),
                                 eos, p.max_new_tokens, seq.stop_reason, server_gap=server_gap, retokenized=text,
                                 plain=plain_outputs[own].get(pid) if own is not None else None)
            out.setdefault((engine, bs), []).append(Compared(comp, seq, v))
        return out

    def _measure_stacks(self, groups: list, scored: list, served_scored: list) -> None:
        """Each other stack's plain decoding, re-scored: its departures from the target; from them each engine's
        tolerance (gate.checks.stack_noise), and the plain decoding's own (the band)."""
        gate = self.tolerance
        config_dtype = str(self.pair.target.dtype).replace("torch.", "")

        def base(engine: str) -> tuple[Tolerance, str, bool]:
            said = self.results.precision(engine)
            precision = said or config_dtype
            return tolerance_for(precision, gate.measured_noise, gate.fixed), precision, said is not None

        plains = {p for p in self.stacks.values() if p is not None}
        for plain in plains:
            rule = base(plain)[0]
            found = Departures()
            for (engine, *_), sc in zip(groups, scored):
                if engine == plain and sc is not None:
                    found.add(sc, rule)
            for sc in served_scored if plain == REFERENCE else []:
                found.add(sc, rule)
            self.plain_departures[plain] = found
            self.tolerances[plain] = stack.plain_tolerance(rule)
        for engine, plain in self.stacks.items():
            rule, precision, reported = base(engine)
            found = self.plain_departures.get(plain) if plain is not None else None
            self.tolerances[engine] = stack.engine_tolerance(rule, found)
            self.stack_noise[engine] = stack.describe(engine, plain, found, self.tolerances[engine], precision,
                                                      reported, config_dtype)

    def _cuts(self, text: str) -> list[int] | None:
        """Character offsets where ``text`` splits into the target tokenizer's tokens; None when its tokens'
        texts do not add up to it (byte-level pieces of one character)."""
        pieces = [self.pair.decode([t]) for t in self.pair.encode(text)]
        if "".join(pieces) != text:
            return None
        cuts, at = [], 0
        for piece in pieces:
            cuts.append(at)
            at += len(piece)
        return cuts

    def _gap_from_reference(self, pid: str, j: int, token: int) -> tuple[float, float] | None:
        """(logprob of the reference's token - logprob of the engine's, tolerance) at position j, from the
        reference server's top-k there.  A token outside the top-k gets the k-th logprob: a lower bound, which
        proves a confident divergence when it exceeds the tolerance but never a near-tie (None: unclassified;
        with logprobs 1, the least an OpenAI-route reference is asked for, the top-k is the reference's own token
        alone)."""
        ref = self.canonical[pid]
        if not ref.top_logprobs or j >= len(ref.top_logprobs):
            return None
        top = ref.top_logprobs[j]
        mine = ref.token_ids[j]
        if mine not in top:
            return None
        tol = self.tolerance.fixed
        if token in top:
            return top[mine] - top[token], tol
        bound = top[mine] - min(top.values())
        return (bound, tol) if bound > tol else None


__all__ = ["CheckContext", "Compared"]
