"""A speedup change explained, not just reported: with the measured step costs, the Leviathan et al. model splits the
change of log S into acceptance (alpha), draft cost (c) and verification cost, and what neither explains."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gate.stats import alpha_from_mean_accepted
from gate.verdict.doc import Explanation


@dataclass(frozen=True)
class Cost:
    """What the Leviathan model needs of one side: tokens per target forward (from acceptance), k, c, v."""

    tokens_per_forward: float
    k: int
    cost_ratio: float | None = None  # c: one draft step over one target step
    verify_ratio: float | None = None  # v: one (k+1)-token verification over one target step


def explain(base: Cost, head: Cost, ratio: float | None = None) -> Explanation:
    """Split a speedup change (``ratio`` = head speedup / base speedup, as measured) into acceptance, draft cost,
    verification cost and what they leave unexplained, in points of the change that add up to it.

    S = T / (v + c k), with T the tokens per target forward (Leviathan et al.: T = (1 - a^(k+1)) / (1 - a);
    their model takes v = 1).  On the log scale the split is exact:

    * acceptance:  log T_h - log T_b
    * draft cost:  -[log(v_b + c_h k_h) - log(v_b + c_b k_b)]
    * verify cost: -[log(v_h + c_h k_h) - log(v_b + c_h k_h)]
    * unexplained: log(ratio) - (the three above)

    Each is then scaled by (ratio - 1) / log(ratio) and given in points (x 100), so that the four add up to the
    measured change in percent, and each keeps its share of the log-scale split (one sign convention: > 0 made
    speculation faster).  Without ``ratio`` the parts are the model's prediction and nothing is unexplained.
    """
    acc = math.log(head.tokens_per_forward / base.tokens_per_forward)
    draft = verify = None
    if None not in (base.cost_ratio, head.cost_ratio):
        vb, vh = base.verify_ratio or 1.0, head.verify_ratio or 1.0
        cb, ch = base.cost_ratio, head.cost_ratio
        draft = -(math.log(vb + ch * head.k) - math.log(vb + cb * base.k))
        verify = -(math.log(vh + ch * head.k) - math.log(vb + ch * head.k))
    model = acc + (draft or 0.0) + (verify or 0.0)
    measured = math.log(ratio) if ratio and ratio > 0 else None
    total = measured if measured is not None else model
    scale = 100 * (math.expm1(total) / total if abs(total) > 1e-12 else 1.0)
    out = Explanation(acceptance=acc * scale, alpha_base=alpha_from_mean_accepted(base.tokens_per_forward, base.k),
                      alpha_head=alpha_from_mean_accepted(head.tokens_per_forward, head.k),
                      model=100 * math.expm1(model))
    if draft is not None:
        out.draft_cost, out.verify_cost = draft * scale, verify * scale
        out.cost_base, out.cost_head, out.verify_base, out.verify_head = cb, ch, vb, vh
    if measured is not None:
        out.change = 100 * (ratio - 1)
        out.unexplained = (measured - model) * scale
    out.sentence = _cause_sentence(out)
    return out


def _cause_sentence(e: Explanation) -> str:
    """The split as a reviewer reads it, rounded so that the printed parts add up to the printed change."""
    parts = [("acceptance", e.acceptance, f" ({e.alpha_base:.2f} → {e.alpha_head:.2f})")]
    if e.draft_cost is not None:
        parts += [("draft cost", e.draft_cost, ""), ("verify cost", e.verify_cost, "")]
    shown = [(name, round(x) + 0, note) for name, x, note in parts]  # + 0: no "-0"
    text = ", ".join(f"{name} {x:+d}{note}" for name, x, note in shown)
    if e.change is None:
        rest = "" if e.draft_cost is not None else "; draft and verification costs not measured"
        return f"{text} points (the model's prediction){rest}"
    change = round(e.change) + 0
    unexplained = change - sum(x for _, x, _ in shown)  # the rounding goes where the model has no say
    rest = "" if e.draft_cost is not None else " (draft and verification costs not measured)"
    return f"{change:+d}% = {text}, unexplained {unexplained:+d} points{rest}"


def main_cause(e: Explanation | None) -> str | None:
    """The part that pulled the speedup down most (None when none did)."""
    if e is None:
        return None
    parts = {"acceptance": e.acceptance, "draft cost": e.draft_cost or 0.0, "verification cost": e.verify_cost or 0.0,
             "unexplained: not acceptance or step costs": e.unexplained or 0.0}
    worst = min(parts, key=parts.get)
    return worst if parts[worst] < 0 else None


__all__ = ["Cost", "explain", "main_cause"]
