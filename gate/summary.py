"""Human-readable summary of a run: Markdown rendered from ``templates/summary.md.j2``.

Every ``{{ }}`` is escaped for Markdown by the environment (:func:`gate.inert.finalize`);
quoted model output and prompt ids go through the ``untrusted`` filter (an inert code
span).  Nothing rendered can break out of its table cell, inject HTML or a link,
or @-mention anyone.
"""

from __future__ import annotations

import math

from jinja2 import Environment, PackageLoader, StrictUndefined

from gate.checksdoc import ChecksDoc
from gate.inert import Inert, code, finalize, markdown
from gate.results import Results, anchor_line


def untrusted(value, limit: int = 80) -> Inert:
    """Model output or user text, made inert for Markdown/HTML and shown in a code span."""
    return code(value, limit)


def inline(value) -> Inert:
    """A sentence of ours that may quote user-controlled names: inert in Markdown tables and HTML."""
    return markdown(value)


def num(value, fmt: str = ".2f", missing: str = "–") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return missing
    return format(value, fmt)


def pct(value, missing: str = "–") -> str:
    return missing if value is None else f"{value:.0%}"


def ms(seconds) -> str:
    return "–" if not seconds else f"{seconds * 1000:.1f}"


def mib(value) -> str:
    return "–" if not value else f"{value / 2**20:.0f} MiB"


def _env() -> Environment:
    env = Environment(loader=PackageLoader("gate", "templates"), undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False,
                      finalize=finalize)  # every {{ }} is escaped for Markdown unless already inert
    env.filters.update(untrusted=untrusted, inline=inline, num=num, pct=pct, mib=mib)
    env.globals.update(ms=ms, anchor_line=anchor_line)
    return env


def render_text(results: Results, checks: ChecksDoc) -> str:
    from gate.checksdoc import retokenized_note

    failed = checks.failing()
    doc = results.model_dump(mode="json", by_alias=True, exclude={"executions", "prompts", "batches"})
    return _env().get_template("summary.md.j2").render(
        results=doc, checks=checks, failed=failed, passed=not failed and results.status == "complete",
        batch_plan=batch_plan(results), retokenized=retokenized_note(checks),
    )


def batch_plan(results: Results) -> list[dict]:
    """Per batch size: compositions, batches, the widest prompt-length spread in one batch, duplicates."""
    rows = []
    for bs in sorted({b.batch_size for b in results.batches}):
        mine = [b for b in results.batches if b.batch_size == bs]
        widest = max(mine, key=lambda b: b.max_prompt_tokens - b.min_prompt_tokens)
        rows.append({"batch_size": bs, "compositions": len({b.composition for b in mine}), "batches": len(mine),
                     "min": widest.min_prompt_tokens, "max": widest.max_prompt_tokens,
                     "duplicates": sum(b.duplicates for b in mine)})
    return rows
