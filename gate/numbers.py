"""The one set of number formatters of every page and sentence the gate writes (the templates' filters, the
verdicts' sentences, the refresh PR): a missing value is shown as ``–``."""

from __future__ import annotations

import math

MISSING = "–"


def num(value, fmt: str = ".2f", missing: str = MISSING) -> str:
    """A number in ``fmt``; None, NaN and the infinities are missing."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return missing
    return format(value, fmt)


def pct(value, missing: str = MISSING) -> str:
    """A share as a whole percentage: 0.953 → ``95%``."""
    return missing if value is None else f"{value:.0%}"


def pct1(value, missing: str = MISSING) -> str:
    """A share to a tenth of a percent: 0.0523 → ``5.2%``."""
    return missing if value is None else f"{value:.1%}"


def signed_pct(value, fmt: str = "+.0%", missing: str = MISSING) -> str:
    """A relative change as a signed percentage: -0.12 → ``-12%`` (``fmt="+.1%"``: ``-12.0%``); a change that
    rounds to nothing is ``+0%``, never ``-0%`` (the ``z`` format option, without needing Python 3.11)."""
    if value is None:
        return missing
    out = format(value, fmt)
    return format(abs(value) * 0, fmt) if not out.lstrip("+-").strip("0.%") else out


def times(value, missing: str = MISSING) -> str:
    """A speedup or ratio: 1.5 → ``1.50x``."""
    return missing if value is None else f"{value:.2f}x"


def ms(seconds) -> str:
    """Seconds as milliseconds (no unit); zero or None is missing."""
    return MISSING if not seconds else f"{seconds * 1000:.1f}"


def mib(value) -> str:
    """Bytes in MiB; zero or None is missing."""
    return MISSING if not value else f"{value / 2**20:.0f} MiB"


__all__ = ["MISSING", "mib", "ms", "num", "pct", "pct1", "signed_pct", "times"]
