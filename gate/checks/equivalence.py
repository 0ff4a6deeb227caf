"""Greedy equivalence: exact match, argmax consistency, first-divergence classification, corruption signatures.

The canonical reference is the non-speculative engine at batch size 1.  For
every speculative output:

* **Exact match** (the metrics of arXiv 2510.22876): is the sequence identical
  to the canonical reference, and what fraction of the reference's tokens does
  it match before the first divergence?
* **Argmax consistency**: re-scored with one teacher-forced target pass, is each
  emitted token within tolerance of the largest logit at its position?  A token
  clearly below the maximum (a *confident inconsistency*) is a bug signature:
  no float noise makes greedy decoding pick it.
* **First divergence**: where a sequence first differs from the reference, the
  two candidates' logits under the shared prefix are compared.  A gap within
  tolerance is a *near-tie* (numerical); a larger gap is a *confident
  divergence* (a bug).
* **Corruption signatures**, each named: ``repetition`` (a loop the reference
  lacks), ``gibberish`` (a run of confidently wrong, unlikely tokens),
  ``truncation`` (stopped early without EOS, or far shorter than the reference
  at a confident divergence), ``empty``, ``overlength`` (more than
  ``max_new_tokens``) and ``eos_ignored`` (tokens after an EOS).

The same analysis of the reference at larger batch sizes is the *batch noise
floor*: how often plain decoding itself changes with batch shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

from gate.checks.doc import EquivalenceSummary, VerdictLine
from gate.engines.scoring import Scorer
from gate.engines.tolerance import BAND_RULE, Tolerance
from gate.inputs.config import REFERENCE

GIBBERISH_PROB = 0.01
GIBBERISH_RUN = 3
LOOP_MAX_PERIOD = 10
LOOP_MIN_SPAN = 12
TRUNCATION_RATIO = 0.5
CONTEXT_TOKENS = 4  # tokens shown around a divergence in examples


@dataclass
class Scored:
    """What the target thinks of each emitted token, given the sequence's own prefix."""

    chosen: list[float]  # logit of the emitted token
    best: list[float]  # largest logit
    best_id: list[int]
    prob: list[float]  # target probability of the emitted token (T=1)
    other: float | None = None  # logit of the reference's token at the first divergence

    def gap(self, t: int) -> float:
        return self.best[t] - self.chosen[t]


def score_outputs(scorer: Scorer, items: list[tuple[tuple, tuple]], others: list[tuple[int, int] | None]
                  ) -> list[Scored]:
    """Re-score outputs; ``others[i] = (position, token)`` also records that token's logit there."""

    def stats(i: int, rows: torch.Tensor) -> Scored:
        out = torch.tensor(items[i][1], device=rows.device)
        chosen = rows.gather(1, out[:, None])[:, 0]
        best, best_id = rows.max(-1)
        prob = torch.softmax(rows, -1).gather(1, out[:, None])[:, 0]
        s = Scored(chosen.tolist(), best.tolist(), best_id.tolist(), prob.tolist())
        if others[i] is not None:
            pos, tok = others[i]
            s.other = float(rows[pos, tok])
        return s

    return scorer.logits_rows(items, stats)


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def find_loop(tokens: list[int]) -> tuple[int, ...] | None:
    """The repeating unit of the longest period-p loop (span >= 12 tokens and >= 3 periods), if any."""
    best = None
    for p in range(1, LOOP_MAX_PERIOD + 1):
        run = 0
        for i in range(p, len(tokens)):
            run = run + 1 if tokens[i] == tokens[i - p] else 0
            if run + p >= max(LOOP_MIN_SPAN, 3 * p):
                unit = tuple(tokens[i - p + 1: i + 1])
                # canonical rotation, so the same loop entered at another phase compares equal
                rot = min(unit[k:] + unit[:k] for k in range(p))
                if best is None or len(rot) < len(best):
                    best = rot
                break
    return best


DivergenceKind = Literal["near_tie", "confident", "unclassified", "length", "band", "plain"]
_WORDS = {"near_tie": "near-tie", "band": "divergence within the cross-stack band",
          "plain": "divergence its own plain decoding shares"}


@dataclass(frozen=True)
class Divergence:
    """Where a sequence first differs from the reference, and what the target says about it.

    ``kind``: ``near_tie`` (|gap| within the tolerance: floating-point noise can flip it), ``confident`` (a bug),
    ``unclassified`` (no target to ask: text only, or no logprobs), ``length`` (one sequence ended where the
    other goes on); for an engine of another stack, ``band`` (beyond the gate's tolerance but within the
    cross-stack band, where that stack's own noise was not measured: not told from noise) and ``plain`` (the
    engine's own plain decoding made the same choice there: the stack's, not speculation's).  ``gap`` is the
    reference token's logit minus the emitted one's (> 0: the reference's token is preferred); ``gap`` and
    ``tolerance`` are None where nothing was scored."""

    position: int
    kind: DivergenceKind
    token: int | None = None  # the engine's token there (None: the engine's sequence ended)
    reference_token: int | None = None  # the reference's token there (None: the reference ended)
    gap: float | None = None
    tolerance: float | None = None

    @classmethod
    def scored(cls, position: int, token: int, reference_token: int, gap: float, tolerance: float,
               kind: DivergenceKind | None = None) -> Divergence:
        """``kind``: as the engine's tolerance classifies the gap; by default near-tie or confident."""
        kind = kind or ("near_tie" if abs(gap) <= tolerance else "confident")
        return cls(position, kind, token, reference_token, gap, tolerance)


@dataclass
class SequenceVerdict:
    prompt_id: str
    slice: str
    identical: bool
    prefix_match: float  # fraction of reference tokens matched before the first divergence
    divergence: Divergence | None = None
    inconsistent: list[dict] = field(default_factory=list)  # confident inconsistencies
    band_inconsistent: list[dict] = field(default_factory=list)  # within the cross-stack band (another stack)
    plain_inconsistent: int = 0  # below the argmax where the engine's own plain decoding emitted the same prefix
    consistent_tokens: int = 0
    scored_tokens: int = 0
    signatures: list[dict] = field(default_factory=list)
    target_loop: dict | None = None  # a loop after a near-tie that the target itself produces (not a signature)


def shared_prefix(out: list[int], plain: list[list[int]] | None) -> int:
    """How many leading tokens of ``out`` the engine's own plain decoding also emitted for this prompt (the longest
    common prefix with any of its outputs); ``len(out) + 1`` when one of them is ``out`` itself."""
    if not plain:
        return 0
    if any(p == out for p in plain):
        return len(out) + 1
    return max((first_divergence(out, p) or 0) for p in plain)


def analyze_sequence(prompt_id: str, slice_: str, out: list[int], ref: list[int], scored: Scored | None,
                     tol: Tolerance, eos: set[int], max_new: int, stop_reason: str,
                     server_gap: tuple[float, float] | None = None, retokenized: bool = False,
                     plain: list[list[int]] | None = None) -> SequenceVerdict:
    """``server_gap``: (gap, tolerance) at the first divergence from a server's own logprobs, when there is no
    local target to re-score with.  ``retokenized``: ``out`` and ``ref`` are texts tokenized here, not the ids
    generated: every difference is unclassified, and no signature that counts tokens applies.  ``plain``: the
    outputs of the engine's own plain decoding for this prompt (another stack's, speculation off): what the engine
    shares with them is that stack's behaviour, not speculation's, and is left to the plain decoding's own line."""
    j = first_divergence(out, ref)
    matched = j if j is not None else len(ref)
    v = SequenceVerdict(prompt_id, slice_, identical=j is None,
                        prefix_match=(matched / len(ref)) if ref else float(not out))
    shared = shared_prefix(out, plain)
    if scored is not None:
        confident_run = 0
        for t in range(len(out)):
            gap = scored.gap(t)
            kind = tol.classify(gap, scored.best[t])
            v.scored_tokens += 1
            if kind == "near_tie":
                v.consistent_tokens += 1
                confident_run = 0
                continue
            finding = {"position": t, "token": out[t], "argmax": scored.best_id[t], "gap": gap,
                       "tolerance": tol.at(scored.best[t])}
            if t < shared or kind == "band":  # the stack's own choice, or not told from its noise
                if t < shared:
                    v.plain_inconsistent += 1
                else:
                    v.band_inconsistent.append(finding)
                confident_run = 0
                continue
            v.inconsistent.append(finding)
            confident_run = confident_run + 1 if scored.prob[t] < GIBBERISH_PROB else 0
            if confident_run == GIBBERISH_RUN:
                v.signatures.append({"name": "gibberish", "position": t - GIBBERISH_RUN + 1,
                                     "detail": f"{GIBBERISH_RUN}+ consecutive tokens the target gives "
                                               f"< {GIBBERISH_PROB:.0%} and clearly below its argmax"})
    if j is not None and j < len(out) and j < len(ref) and scored is not None and scored.other is not None:
        gap = scored.other - scored.chosen[j]  # > 0: the reference's token is preferred
        kind = "plain" if j < shared else tol.classify(gap, scored.best[j])
        v.divergence = Divergence.scored(j, out[j], ref[j], gap, tol.at(scored.best[j]), kind)
    elif j is not None and j < len(out) and j < len(ref) and server_gap is not None:
        v.divergence = Divergence.scored(j, out[j], ref[j], *server_gap)
    elif j is not None:
        # no target to ask (text, or no scores): a difference, but not a bug or noise; else one sequence ended
        unclassified = retokenized or (j < len(out) and j < len(ref) and scored is None)
        v.divergence = Divergence(j, "unclassified" if unclassified else "length",
                                  out[j] if j < len(out) else None, ref[j] if j < len(ref) else None)
    if shared > len(out):  # the engine's output is its own plain decoding's, signatures and all
        return v
    # signatures
    if not out:
        v.signatures.append({"name": "empty", "detail": "no tokens generated"})
    if retokenized:  # token counts of re-tokenized text say nothing about the budget or EOS; loops still show
        _repetition(v, out, ref, None)
        return v
    if len(out) > max_new:
        v.signatures.append({"name": "overlength", "detail": f"{len(out)} tokens > max_new_tokens {max_new}"})
    eos_at = [t for t, tok in enumerate(out) if tok in eos]
    if eos_at and eos_at[0] < len(out) - 1:
        v.signatures.append({"name": "eos_ignored", "position": eos_at[0],
                             "detail": f"{len(out) - 1 - eos_at[0]} tokens after EOS"})
    ends_eos = bool(out) and out[-1] in eos
    if out and not ends_eos and len(out) < max_new:
        v.signatures.append({"name": "truncation", "detail": f"stopped after {len(out)} of {max_new} tokens "
                                                             "without EOS"})
    elif ref and len(out) < TRUNCATION_RATIO * len(ref) and v.divergence and v.divergence.kind == "confident":
        v.signatures.append({"name": "truncation", "detail": f"{len(out)} tokens vs {len(ref)} in the reference, "
                                                             "ended at a confident divergence"})
    _repetition(v, out, ref, scored, plain)
    return v


def _repetition(v: SequenceVerdict, out: list[int], ref: list[int], scored: Scored | None,
                plain: list[list[int]] | None = None) -> None:
    """A loop the reference lacks is a signature, unless the target itself produces it from the same prefix.

    After a near-tie the two sequences legitimately go their own ways, and a small model's own greedy
    continuation may loop where the reference's did not.  When every emitted token is within tolerance of the
    target's argmax given its own prefix (re-scored here), the loop *is* the target's greedy path: it is recorded
    as ``target_loop``, not as a signature.  Without re-scoring (text or server logprobs) nothing shows whose loop
    it is, so it stays a signature."""
    loop = find_loop(out)
    if loop is None or find_loop(ref) == loop or any(find_loop(p) == loop for p in plain or ()):
        return  # the reference loops there too, or the stack's own plain decoding does
    # band and plain divergences are no bugs either: another stack's precision, not told from it, or its own choice
    own = (scored is not None and not v.inconsistent and v.scored_tokens == len(out)
           and v.divergence is not None and v.divergence.kind in ("near_tie", "band", "plain"))
    if own:
        v.target_loop = {"position": v.divergence.position, "unit": list(loop),
                         "detail": f"loop of {len(loop)} token(s) after a {_WORDS[v.divergence.kind]} at position "
                                   f"{v.divergence.position}: every token is the target's own argmax given its "
                                   "prefix, so the target loops there itself"}
        return
    v.signatures.append({"name": "repetition", "detail": f"loop of {len(loop)} token(s) repeated, "
                                                         "absent from the reference", "unit": list(loop)})


def summarize(verdicts: list[SequenceVerdict]) -> dict:
    n = len(verdicts)
    kinds = [v.divergence.kind for v in verdicts if v.divergence]
    scored = sum(v.scored_tokens for v in verdicts)
    return {
        "sequences": n,
        "exact_match": sum(v.identical for v in verdicts) / n if n else None,
        "prefix_match": sum(v.prefix_match for v in verdicts) / n if n else None,
        "consistent_share": (sum(v.consistent_tokens for v in verdicts) / scored) if scored else None,
        "confident_inconsistencies": sum(len(v.inconsistent) for v in verdicts),
        "band_inconsistencies": sum(len(v.band_inconsistent) for v in verdicts),
        "plain_inconsistencies": sum(v.plain_inconsistent for v in verdicts),
        "divergences": {"near_tie": kinds.count("near_tie"), "confident": kinds.count("confident"),
                        "length": kinds.count("length"), "unclassified": kinds.count("unclassified"),
                        "band": kinds.count("band"), "plain": kinds.count("plain")},
        "signatures": _count_signatures(verdicts),
        "target_loops": sum(v.target_loop is not None for v in verdicts),
    }


def _count_signatures(verdicts: list[SequenceVerdict]) -> dict:
    out: dict[str, int] = {}
    for v in verdicts:
        for s in {s["name"] for s in v.signatures}:
            out[s] = out.get(s, 0) + 1
    return out


def by_slice(verdicts: list[SequenceVerdict]) -> dict:
    slices = sorted({v.slice for v in verdicts})
    return {s: {k: summarize([v for v in verdicts if v.slice == s])[k] for k in ("sequences", "exact_match",
                                                                                   "prefix_match")}
            for s in slices}


def example(v: SequenceVerdict, out: list[int], ref: list[int], decode) -> dict:
    """A divergence shown with a few decoded tokens on either side."""
    j = v.divergence.position
    lo = max(0, j - CONTEXT_TOKENS)
    return {
        "prompt_id": v.prompt_id, "position": j, "kind": v.divergence.kind,
        "gap": v.divergence.gap, "tolerance": v.divergence.tolerance,
        "before": decode(out[lo:j]),
        "got": decode(out[j:j + CONTEXT_TOKENS]),
        "reference": decode(ref[j:j + CONTEXT_TOKENS]),
    }


# --- the check ---------------------------------------------------------------------------------

MAX_EXAMPLES = 5


def summary_of(compared: list, canonical: dict, decode) -> EquivalenceSummary:
    """Counts, per-slice figures and a few decoded examples for one engine at one batch size."""
    vs = [c.verdict for c in compared]
    exs = []
    for c in compared:
        v = c.verdict
        if v.divergence and v.divergence.kind != "length" and len(exs) < MAX_EXAMPLES:
            exs.append(example(v, c.output.token_ids, canonical[v.prompt_id].token_ids, decode))
    return EquivalenceSummary.model_validate({
        **summarize(vs), "compositions": len({c.composition for c in compared}), "by_slice": by_slice(vs),
        "examples": exs,
        "sequences_with_signatures": [{"prompt_id": v.prompt_id, "signatures": v.signatures}
                                      for v in vs if v.signatures][:MAX_EXAMPLES],
        "first_inconsistencies": [{"prompt_id": v.prompt_id, **v.inconsistent[0]}
                                  for v in vs if v.inconsistent][:MAX_EXAMPLES],
        "target_loop_examples": [{"prompt_id": v.prompt_id, **v.target_loop}
                                 for v in vs if v.target_loop][:MAX_EXAMPLES]})


def run(results, ctx) -> tuple[dict[str, dict[str, EquivalenceSummary]] | None, list[VerdictLine]]:
    """Each engine under test at each batch size against the canonical reference."""
    if not any(ex.mode == "greedy" for ex in results.executions):
        return None, []
    verdicts = []
    if not ctx.canonical:
        verdicts.append(VerdictLine.of("equivalence", None, "fail", "no canonical reference (non-speculative, batch "
                                "size 1) in the results, so nothing can be compared; rerun `specguard run`"))
    eq_cfg = ctx.config.checks.equivalence
    findings: dict = {}
    floor = pooled_floor(ctx)
    for engine, bs in ctx.compared_keys():
        if engine == REFERENCE or engine in ctx.own_references:  # plain decodings: gate.checks.noise_floor
            continue
        s = summary_of(ctx.compared(engine, bs), ctx.canonical, ctx.pair.decode)
        findings.setdefault(engine, {})[str(bs)] = s
        verdicts += _verdicts(engine, bs, s, eq_cfg, floor, ctx.stacks.get(engine, ""))
    return findings, verdicts


# Divergences the gate cannot classify (a text-only stack with no usable logprobs) are judged against the
# reference's own noise floor: plain decoding at every batch size above 1 against batch size 1, pooled.  An engine
# whose share of unclassified divergences exceeds that floor's share by a one-sided Fisher exact test at this level
# fails; with no floor measured (batch size 1 alone), more than UNJUDGED_SHARE of the sequences differing does.
UNCLASSIFIED_ALPHA = 0.01
UNJUDGED_SHARE = 0.5


@dataclass(frozen=True)
class Floor:
    """How often plain decoding differs from itself at batch size 1, over every larger batch size (pooled)."""

    differing: int
    compared: int


def pooled_floor(ctx) -> Floor | None:
    compared = [c for engine, bs in ctx.compared_keys() if engine == REFERENCE for c in ctx.compared(engine, bs)]
    if not compared:
        return None
    return Floor(sum(not c.verdict.identical for c in compared), len(compared))


def beyond_floor(unclassified: int, sequences: int, floor: Floor | None) -> tuple[bool, str]:
    """Whether ``unclassified`` differing sequences of ``sequences`` are more than float noise explains here, and
    the evidence in words."""
    if floor is None or not floor.compared:
        share = unclassified / sequences if sequences else 0.0
        return share > UNJUDGED_SHARE, (f"{unclassified} of {sequences} sequences differ and no noise floor was "
                                        f"measured (a batch size above 1 measures it); more than "
                                        f"{UNJUDGED_SHARE:.0%} differing is more than float noise explains")
    from scipy.stats import fisher_exact

    p = float(fisher_exact([[unclassified, sequences - unclassified],
                            [floor.differing, floor.compared - floor.differing]], alternative="greater").pvalue)
    return p < UNCLASSIFIED_ALPHA, (f"{unclassified} of {sequences} sequences differ where the gate cannot tell bug "
                                    f"from noise, against {floor.differing} of {floor.compared} for plain decoding "
                                    f"across batch sizes (its noise floor; one-sided Fisher p={p:.2g}, "
                                    f"alpha {UNCLASSIFIED_ALPHA})")


def _verdicts(engine: str, bs: int, s: EquivalenceSummary, eq_cfg, floor: Floor | None = None,
              plain: str | None = "") -> list[VerdictLine]:
    """``plain``: for an engine of another stack, its own plain decoding (None: it has none, its noise is not
    measured); "" for the gate's own engines."""
    out = []
    conf, incons = s.divergences.confident, s.confident_inconsistencies
    near = s.divergences.near_tie
    problems = []
    if conf > eq_cfg.max_confident_divergences:
        problems.append(f"{conf} confident divergence(s) from the reference")
    if incons > eq_cfg.max_confident_inconsistencies:
        problems.append(f"{incons} token(s) clearly below the target's argmax")
    if s.divergences.length:
        problems.append(f"{s.divergences.length} sequence(s) that stop or continue where the reference does not")
    unclassified = s.divergences.unclassified
    if s.exact_match is not None and s.exact_match < eq_cfg.min_exact_match:
        problems.append(f"exact match {s.exact_match:.0%} < min_exact_match {eq_cfg.min_exact_match:.0%}")
    too_many, evidence = beyond_floor(unclassified, s.sequences, floor) if unclassified else (False, "")
    if too_many:
        problems.append(evidence)
    in_band = s.divergences.band + s.band_inconsistencies
    owned = [f"{n} {what}" for n, what in ((s.divergences.plain, "divergence(s)"),
                                            (s.plain_inconsistencies, "token(s) below the target's argmax")) if n]
    shared = (f"; {' and '.join(owned)} that its own plain decoding ({plain}) shares: the stack's, not "
              "speculation's" if owned else "")
    if problems:
        out.append(VerdictLine.of("equivalence", engine, "fail", "; ".join(problems) + ": a bug, not float noise", bs))
    elif unclassified:
        out.append(VerdictLine.of("equivalence", engine, "warn",
                           f"equivalence unproven: {s.exact_match:.0%} identical to the reference; {unclassified} "
                           "divergence(s) that cannot be classified (this stack gives no usable logprobs), not more "
                           f"than float noise explains: {evidence}", bs))
    elif in_band:
        out.append(VerdictLine.of("equivalence", engine, "warn",
                           f"equivalence unproven: {s.exact_match:.0%} identical to the reference; "
                           f"{s.divergences.band} divergence(s) and {s.band_inconsistencies} token(s) below the "
                           f"target's argmax lie within the cross-stack band ({BAND_RULE}), where this stack's own "
                           "float noise was not measured, so they cannot be told from noise; give it its own plain "
                           "decoding (engines[].reference, http.reference) to measure it", bs))
    else:
        loops = (f"; {s.target_loops} of them loop afterwards as the target itself does from that prefix (every "
                 "token its argmax): not a repetition signature") if s.target_loops else ""
        out.append(VerdictLine.of("equivalence", engine, "pass",
                           (f"{s.exact_match:.0%} identical to the reference; {near} divergence(s), all near-ties "
                            f"(float noise){loops}" if near else f"{s.exact_match:.0%} identical to the reference")
                           + shared, bs))
    for name, count in sorted(s.signatures.items()):
        out.append(VerdictLine.of(f"signature:{name}", engine, "fail", f"{count} sequence(s) show {name}", bs))
    return out
