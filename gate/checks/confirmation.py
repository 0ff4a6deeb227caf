"""Confirmation: a distribution failure near alpha is re-sampled before it fails.

A correct sampler fails the distribution test with probability alpha, per engine and batch size: a gate that
samples four groups at alpha = 1% is red on unchanged code once in 25 runs.  So a rejection that is not
overwhelming is confirmed by a second, independent sampling pass first (the same prompts and batch sizes, new
per-request seeds) and fails only if that pass rejects too.

**The statistic.**  One group (engine x batch size) runs k tests (four with a draft) and fails when its smallest
p-value is below ``alpha / k`` (Bonferroni).  The same decision, read as one p-value, is the group's
Bonferroni-adjusted ``P = min(1, k * min_i p_i)``: super-uniform under the null (``Pr(P <= x) <= x`` for every x,
whatever the dependence between the k tests), and each p_i is itself valid at any n (the z-tests' are calibrated
on null draws, :mod:`gate.checks.null_draws`).

**The rule** (``a1`` is ``checks.distribution.confirm_floor``, alpha/100 unless set):

* stage 1, the run's sampling pass gives ``P1``: ``P1 < a1`` fails at once; ``P1 >= alpha`` passes (one pass
  alone failed below alpha, as the check did before); ``a1 <= P1 < alpha`` is confirmed:
* stage 2, a second pass gives ``P2`` from its own tokens and its own null draws: fail iff ``P2 < alpha``.

Sampled tokens the truncated distribution gives probability 0 fail at once, with no p-value and no confirmation.

**Its size.**  Under the null, let ``F(x) = Pr(P1 < x) <= x``.  The second pass draws new tokens with new seeds,
so given the first pass ``P2`` is again super-uniform: ``Pr(P2 < alpha | stage 1) <= alpha``.  Then

    Pr(fail) = F(a1) + (F(alpha) - F(a1)) * Pr(P2 < alpha)
             <= F(a1) (1 - alpha) + F(alpha) alpha
             <= a1 (1 - alpha) + alpha * alpha  =  a1 + (alpha - a1) alpha

which is 0.0001 + 0.0099 * 0.01 = 0.000199 at alpha = 1%: about alpha / 50, below alpha as the check states.
A gate of G groups is red on unchanged code with probability at most G times that.

**Its power.**  Against a real distortion whose single pass rejects with probability ``b`` at alpha and ``b1`` at
the floor, the two passes are independent draws from the same broken sampler, so the rule rejects with
probability ``b1 + (b - b1) b >= b^2``: unchanged for a bug the test sees plainly (b near 1, the mutants), and a
loss only near the test's resolution (b = 0.8 gives at least 0.64).  The check's power simulation reports both
(``combined``, one pass at alpha; ``confirmed``, this rule), computed from the same planted samples.

**Why this design, not another.**  Fisher's combination of two passes (``-2 ln(P1 P2)`` against chi-square with
4 degrees of freedom) holds alpha exactly, but it runs the second pass on every gate, not on the rare near-miss,
and keeps the false-alarm rate at alpha, which is what the confirmation is for.  A two-stage rule that spends all
of alpha (a continue region wider than alpha, a second threshold tuned to reach alpha exactly) buys power at the
resolution and keeps the false alarms too.  This rule asks the second pass the same question at the same alpha,
which a reader can check without a table, and moves the false-alarm rate from alpha to about alpha / 50.

The floor a1 only saves the second pass on an overwhelming failure; it does not change the bound much.  With the
default 2,000 null draws a calibrated z-test's p-value is at least 1/2001, so its adjusted P at least 4/2001 =
0.002: only the PIT's exact KS p-value reaches the default floor, and a z-test failure is always confirmed
(``checks.distribution.null_trials: 40000`` lets them reach 0.0001, at 20 times the calibration's cost).

The second pass runs only inside ``specguard gate``, which still has the engines: ``specguard check`` on a run
directory without one cannot confirm, and fails such a group as ``unconfirmed`` (the single-pass rule at alpha,
the check as it was before confirmation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Decision = Literal["passed", "failed at once", "confirmed", "not confirmed", "unconfirmed"]


def adjusted(pvalues: dict[str, float]) -> float | None:
    """The group's Bonferroni-adjusted p-value ``min(1, k * min p)`` over its k tests (None: no test ran)."""
    if not pvalues:
        return None
    return min(1.0, len(pvalues) * min(pvalues.values()))


def default_floor(alpha: float) -> float:
    return alpha / 100


def size(alpha: float, floor: float) -> float:
    """The rule's false-rejection bound per group under the null: ``a1 + (alpha - a1) alpha``."""
    return floor + (alpha - floor) * alpha


@dataclass(frozen=True)
class Rule:
    alpha: float
    floor: float
    enabled: bool = True

    @classmethod
    def of(cls, dcfg) -> Rule:
        """From ``checks.distribution`` (its ``alpha``, ``confirm``, ``confirm_floor``)."""
        floor = dcfg.confirm_floor if dcfg.confirm_floor is not None else default_floor(dcfg.alpha)
        return cls(dcfg.alpha, floor, dcfg.confirm)

    def first(self, p1: float | None) -> Decision:
        """Stage 1 alone: passed, failed at once, or (in the continue region) unconfirmed."""
        if p1 is None or p1 >= self.alpha:  # one pass rejects below alpha / k: P1 below alpha
            return "passed"
        if p1 < self.floor or not self.enabled:
            return "failed at once"
        return "unconfirmed"

    def decide(self, p1: float | None, p2: float | None) -> Decision:
        """Both stages: ``p2`` None where no second pass ran."""
        first = self.first(p1)
        if first != "unconfirmed" or p2 is None:
            return first
        return "confirmed" if p2 < self.alpha else "not confirmed"

    def size(self) -> float:
        return size(self.alpha, self.floor) if self.enabled else self.alpha

    def to_dict(self) -> dict:
        """As ``checks.json`` states it (``confirm``)."""
        return {"enabled": self.enabled, "floor": self.floor, "size": self.size()}

    def power(self, at_floor: float, at_alpha: float) -> float:
        """The rule's rejection rate from one pass's rates at the floor and at alpha (independent passes)."""
        if not self.enabled:
            return at_alpha
        return at_floor + (at_alpha - at_floor) * at_alpha


def fails(decision: Decision) -> bool:
    """Whether the group fails: at once, confirmed, or left unconfirmed (``check`` without the second pass)."""
    return decision in ("failed at once", "confirmed", "unconfirmed")



def decision(rule: Rule, pv: dict[str, float], outside: int, second) -> tuple[str, dict | None]:
    """The group's decision and, where the rule had to look past one pass, what
    each pass gave: ``second`` computes the confirmation pass's (n, p-values, tokens outside the truncation), None
    where the run has none."""
    if outside:  # no p-value, no confirmation: the truncated distribution gives these tokens probability 0
        return "failed at once", None
    p1 = adjusted(pv)
    decided = rule.first(p1)
    if decided == "passed":
        return decided, None
    if decided == "failed at once":
        return decided, {"p1": p1, "decision": decided}
    if second is None:
        return decided, {"p1": p1, "decision": decided}
    n2, pv2, outside2 = second()
    p2 = adjusted(pv2)
    decided = "confirmed" if outside2 else rule.decide(p1, p2)
    return decided, {"p1": p1, "p2": p2, "n2": n2, "pvalues2": pv2, "decision": decided,
                      **({"outside2": outside2} if outside2 else {})}


def said(confirm: dict | None, rule: Rule | None) -> str:
    """What the confirmation did, as a clause of the verdict line."""
    if not confirm or rule is None or not rule.enabled:
        return ""
    d = confirm["decision"]
    if d == "failed at once":
        return f"; below the confirmation floor {rule.floor:g}: no second pass"
    if d == "unconfirmed":
        return (f"; unconfirmed: adjusted p={confirm['p1']:.2g} lies between the floor {rule.floor:g} and alpha, so a "
                "second sampling pass decides, and this run has none (`specguard gate` runs it while the engines are "
                "up; `specguard check` cannot): failed as one pass at alpha")
    second = f"second pass adjusted p={confirm['p2']:.2g} on {confirm['n2']} tokens"
    if confirm.get("outside2"):
        second = f"second pass: {confirm['outside2']} tokens outside the truncated distribution"
    if d == "confirmed":
        return f"; confirmed: first pass adjusted p={confirm['p1']:.2g}, {second}"
    return f"; the first pass's adjusted p={confirm['p1']:.2g} was not confirmed: {second}"


__all__ = ["Decision", "Rule", "adjusted", "decision", "default_floor", "fails", "said", "size"]
