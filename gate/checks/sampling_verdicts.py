"""What the distribution check says of one engine and batch size (gate/checks/distribution.py decides it): tokens
outside the truncation, too few tokens, a failure with its p-value and whether a second pass confirmed it, the
control's own failure, or a pass."""

from __future__ import annotations

from gate.checks.confirmation import Rule, said
from gate.checks.doc import VerdictLine
from gate.inputs.config import REFERENCE


def verdicts_for(engine: str, bs: int, n: int, pv: dict, failed: bool, dcfg,
              asymptotic: dict | None = None, outside: int = 0, sampling=None, confirm: dict | None = None,
              rule: Rule | None = None) -> list[VerdictLine]:
    out = []
    if outside:  # no p-value needed: the served distribution gives these tokens probability 0
        what = (f"{outside} of {n} sampled tokens lie outside the truncated distribution ({sampling.described()} "
                "drops them): the sampler does not apply the truncation")
        out.append(VerdictLine.of("distribution", engine, "warn" if engine == REFERENCE else "fail",
                                  f"the control (plain sampling) too: {what}" if engine == REFERENCE else what, bs))
        return out
    if n < dcfg.num_samples:
        out.append(VerdictLine.of("distribution", engine, "warn", f"only {n} of {dcfg.num_samples} sampled tokens "
                                                           "available", bs))
    pmin = min(pv.values()) if pv else None
    worst = min(pv, key=pv.get) if pv else None
    if asymptotic and worst is not None and asymptotic.get(worst) is not None and asymptotic[worst] < pmin / 10:
        # a calibrated p-value stops at 1 / (1 + draws): the normal approximation says how far beyond it lies
        worst = f"{worst}; asymptotic p={asymptotic[worst]:.2g}"
    how = said(confirm, rule)
    if engine == REFERENCE:
        if failed:
            out.append(VerdictLine.of("distribution", engine, "warn",
                               f"the control (plain sampling) fails too (p={pmin:.2g} on {worst}{how}): the test "
                               "cannot separate engines on this setup", bs))
        elif confirm and confirm["decision"] == "not confirmed":
            out.append(VerdictLine.of("distribution", engine, "info", f"the control (plain sampling) passes{how}",
                                      bs))
    elif failed and confirm and confirm["decision"] == "unconfirmed":
        out.append(VerdictLine.of("distribution", engine, "fail",
                           f"sampled tokens may not be distributed as the target's (p={pmin:.2g} on {worst}, "
                           f"alpha={dcfg.alpha}/{len(pv)}){how}", bs))
    elif failed:
        out.append(VerdictLine.of("distribution", engine, "fail",
                           f"sampled tokens are not distributed as the target's (p={pmin:.2g} on {worst}, "
                           f"alpha={dcfg.alpha}/{len(pv)}{how})", bs))
    elif pv:
        out.append(VerdictLine.of("distribution", engine, "pass",
                           f"consistent with the target's distribution (smallest p={pmin:.2g}, n={n}{how})", bs))
    return out


__all__ = ["verdicts_for"]
