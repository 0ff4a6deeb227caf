"""Rendering: the one Jinja environment, the comment's sections, the checks' full text, the terminal and the chart
(see :mod:`gate.report`)."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from jinja2 import Environment, PackageLoader, StrictUndefined

from gate.checks.doc import ChecksDoc, retokenized_note
from gate.numbers import mib, ms, num, pct, pct1, signed_pct, times
from gate.report.inert import Inert, code, finalize, markdown, terminal
from gate.report.page import COMMENT_LIMIT, FOOTER, KEEP, SUMMARY_LIMIT, Page, Section, comment_marker, utf8_size
from gate.run.results import Results, anchor_line

if TYPE_CHECKING:
    from gate.verdict.baseline import Baseline
    from gate.verdict.doc import VerdictDoc

STATUS_ICON = {"pass": "✅", "fail": "❌", "warn": "⚠️", "neutral": "⚪", "info": "ℹ️",
               "slower": "↘️"}  # a speedup change's mark (SpeedupChange.mark): slower, inside the family's spread
# A first divergence's kind (gate.checks.equivalence.Divergence) in the report's words.
DIVERGENCE_WORDS = {"near_tie": "near-tie", "confident": "confident divergence", "unclassified": "unclassified",
                    "length": "length difference", "band": "within the cross-stack band (not told from noise)",
                    "plain": "shared with its own plain decoding"}


def untrusted(value, limit: int = 80) -> Inert:
    """Model output or user text, made inert for Markdown/HTML and shown in a code span."""
    return code(value, limit)


def inline(value) -> Inert:
    """A sentence of ours that may quote user-controlled names: inert in Markdown tables and HTML."""
    return markdown(value)


@cache
def environment() -> Environment:
    """The one Jinja environment of every page: the comment's sections and the checks' full text."""
    env = Environment(loader=PackageLoader("gate.report", "templates"), undefined=StrictUndefined, trim_blocks=True,
                      lstrip_blocks=True, keep_trailing_newline=True, autoescape=False,
                      finalize=finalize)  # every {{ }} is escaped for Markdown unless already inert
    env.filters.update(untrusted=untrusted, inline=inline, num=num, pct=pct, pct1=pct1, mib=mib, signed=signed_pct,
                       x=times)
    from gate.checks.stack_noise import sentence as stack_sentence
    from gate.checks.traffic import crossover_sentence

    env.globals.update(icon=STATUS_ICON, divergence_word=DIVERGENCE_WORDS, ms=ms, anchor_line=anchor_line,
                       crossover_sentence=crossover_sentence, stack_sentence=stack_sentence)
    return env


def marker(name: str) -> Inert:
    """The hidden marker that identifies this config's comment on a PR (:func:`gate.report.page.comment_marker`)."""
    return Inert(comment_marker(name))


def _load_levels(verdict: VerdictDoc) -> list[dict]:
    """Per engine and batch size: base and head speedup as its judged change estimates them (the geometric mean
    over its cells: head / base is the change), and the step costs (the same for every slice of a load level, so
    shown once per load level, not per row)."""
    groups: dict[tuple, list] = {}
    for c in verdict.speedup:
        groups.setdefault((c.engine, c.batch_size), []).append(c)
    out = []
    for (engine, bs), cells in sorted(groups.items()):
        e = next((c.explanation for c in cells if c.explanation and c.explanation.cost_base is not None), None)
        change = next((c for c in verdict.speedup_levels if c.engine == engine and c.batch_size == bs), None)
        out.append({"engine": engine, "batch_size": bs, "base": change.base.estimate if change else None,
                    "head": change.head.estimate if change else None, "costs": e, "change": change})
    return out


MARK_WORDS = {"pass": "pass", "fail": "fail", "warn": "warn", "neutral": "not judged",
              "slower": "slower, inside the family's spread"}

LINK_LABELS = {"run": "workflow run", "artifact": "artifact", "baseline": "baseline file",
               "baseline_commit": "baseline's commit"}


def _safe_links(links: dict[str, str]) -> Inert | None:
    """Markdown links from URLs that are only an https origin and a plain path (anything else is left out)."""
    import re

    safe = [f"[{label}]({links[key]})" for key, label in LINK_LABELS.items()
            if key in links and re.fullmatch(r"https://[A-Za-z0-9.:-]+(/[A-Za-z0-9_.@+/-]*)?(#artifacts)?", links[key])]
    return Inert(" · ".join(safe)) if safe else None


def build_page(results: Results, checks: ChecksDoc, verdict: VerdictDoc, baseline: Baseline | None, name: str,
               examples_limit: int = 20, links: dict[str, str] | None = None, cases: list[dict] | None = None) -> Page:
    """``links``: the workflow run, its artifact, the baseline file and the commit it came from (``gate.ci`` reads
    them off the job's environment; none outside CI).  ``cases``: the minimal cases of the run's failing checks
    (``repro/index.json``'s, gate.repro)."""
    env = environment()
    ctx = {"results": results, "checks": checks, "verdict": verdict, "baseline": baseline, "name": name,
           "marker": marker(name), "levels": _load_levels(verdict), "links": _safe_links(links or {}),
           "examples": _examples(checks, examples_limit), "chart": _chart(checks),
           "repro": _repro(checks), "eq_rows": _eq_rows(checks, verdict, baseline), "cases": cases or [],
           "retokenized": retokenized_note(checks),
           "traffic_changes": {(t.engine, t.rate): t for t in verdict.traffic},
           "slo": ", ".join(f"{k.removesuffix('_s').upper()} ≤ {v * 1000:g} ms"
                            for k, v in (checks.traffic.slo if checks.traffic else {}).items())}
    page = Page()
    for section, priority in (("headline", KEEP), ("budget", KEEP), ("changed", 90), ("equivalence", 80), ("cases", 78),
                              ("reproducibility", 70),
                              ("distribution", 60), ("speedup", 75), ("traffic", 74), ("acceptance", 50), ("chart", 30),
                              ("examples", 20), ("verdicts", 10), (FOOTER, KEEP)):
        text = env.get_template(f"report/{section}.md.j2").render(**ctx)
        if text.strip():
            page.sections.append(Section(section, text, priority))
    return page


def render_comment(page: Page) -> str:
    return page.render(COMMENT_LIMIT)


def render_summary(page: Page, details: str | None = None, limit: int = SUMMARY_LIMIT) -> str:
    """The step summary: the comment's sections, then ``details`` (the checks' full text) as the least important
    section, the whole bounded by one rule (the details go first when the page must be cut)."""
    sections = list(page.sections)
    if details:
        at = len(sections) - 1 if sections and sections[-1].name == FOOTER else len(sections)
        sections.insert(at, Section("details", "\n## Details\n\n" + details, priority=5))
    return Page(sections).render(limit, size=utf8_size)


def _examples(checks: ChecksDoc, limit: int) -> list[dict]:
    out = []
    for engine, rows in (checks.equivalence or {}).items():
        for bs, s in rows.items():
            for e in s.examples:
                out.append({"engine": engine, "batch_size": bs, **e})
    return out[:limit]


def _eq_rows(checks: ChecksDoc, verdict: VerdictDoc, baseline: Baseline | None) -> list[dict]:
    rows = []
    failed = {(c.engine, c.batch_size) for c in verdict.checks if c.status == "fail"
              and (c.check == "equivalence" or c.check.startswith("signature:"))}
    unproven = {(c.engine, c.batch_size) for c in verdict.checks if c.status == "warn" and c.check == "equivalence"}
    for engine, per_bs in (checks.equivalence or {}).items():
        for bs, s in per_bs.items():
            base = baseline.equivalence.get(engine, {}).get(bs) if baseline else None
            rows.append({"engine": engine, "batch_size": bs, "sequences": s.sequences,
                         "base": base.exact_match if base else None, "head": s.exact_match,
                         "near": s.divergences.near_tie, "confident": s.divergences.confident,
                         "own": s.divergences.plain, "band": s.divergences.band,
                         "length": s.divergences.length, "incons": s.confident_inconsistencies,
                         "signatures": ", ".join(f"{k}: {n}" for k, n in sorted(s.signatures.items())) or "none",
                         "compositions": s.compositions,
                         "status": "fail" if (engine, int(bs)) in failed else
                         "warn" if (engine, int(bs)) in unproven else "pass"})
    return rows


def _repro(checks: ChecksDoc) -> list[str]:
    from gate.checks.reproducibility import sentence

    out = []
    for engine, r in (checks.reproducibility or {}).items():
        if any(x is not None for x in (r.bitwise_across_batch_sizes, r.bitwise_across_runs,
                                       r.bitwise_across_compositions)):
            out.append(Inert(f"**{inline(engine)}**: {inline(sentence(r))}"))
    return out


def _chart(checks: ChecksDoc) -> dict | None:
    """Speedup against batch size, one line per slice, for a Mermaid xychart-beta."""
    engines = checks.speedup.engines if checks.speedup else {}
    if not engines:
        return None
    engine = next(iter(engines))
    e = engines[engine]
    sizes = sorted(e.load_curve, key=int)
    if len(sizes) < 2:
        return None
    lines = []
    for slc, rows in sorted(e.by_slice.items()):
        vals = [rows[bs].speedup.estimate if bs in rows else None for bs in sizes]
        if all(v is not None for v in vals):
            lines.append({"slice": slc, "points": [round(v, 2) for v in vals]})
    if not lines:
        return None
    top = max(max(line["points"]) for line in lines)
    return {"engine": engine, "sizes": sizes, "lines": lines, "top": round(max(2.0, top * 1.1), 1)}


# --- the terminal -------------------------------------------------------------------------------


def print_terminal(verdict: VerdictDoc, console=None, note: str | None = None) -> None:
    """The verdict as rich tables on a terminal; plain, uncoloured text when stdout is not one.  ``note``: a
    caveat for the first line (a comparison of re-tokenized text).

    Every cell is a :func:`gate.report.inert.terminal` Text: nothing a message quotes is read as console markup.
    """
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = console or Console()
    style = {"pass": "green", "fail": "bold red", "warn": "yellow", "neutral": "dim", "info": "dim"}
    first = f"specguard: {verdict.outcome.upper()}" + (f" · {note}" if note else "")
    console.print(Text.assemble(terminal(first, style.get(verdict.outcome, "")), " — ", terminal(verdict.headline)),
                  highlight=False, soft_wrap=not console.is_terminal)
    if not console.is_terminal:  # a CI log: one unwrapped line per verdict and per speedup change, no box drawing
        for c in verdict.checks:
            console.print(terminal(f"{c.status:<7} {c.check:<24} {c.engine or '–':<14} "
                                   f"{('bs ' + str(c.batch_size)) if c.batch_size else '–':<6} {c.why}"),
                          highlight=False, soft_wrap=True)
        for c in verdict.speedup:
            console.print(terminal(f"speedup {c.engine} {c.slice or '–'} bs {c.batch_size} context {c.bucket or '–'}: "
                                   f"{times(c.base.estimate)} → {times(c.head.estimate)} {_change(c)} "
                                   f"{MARK_WORDS[c.mark()]}"
                                   + (f" ({c.explanation.sentence})" if c.explanation else "")),
                          highlight=False, soft_wrap=True)
        for c in verdict.traffic:
            console.print(terminal(f"traffic {c.engine} {c.rate:g} req/s: latency speedup {times(c.base.estimate)} → "
                                   f"{times(c.head.estimate)} {_change(c)} {c.status}"),
                          highlight=False, soft_wrap=True)
        return
    table = Table(show_header=True, header_style="bold")
    for col in ("status", "check", "engine", "batch size", "why"):
        table.add_column(col, overflow="fold")
    for c in verdict.checks:
        table.add_row(terminal(c.status, style.get(c.status, "")), terminal(c.check), terminal(c.engine or "–"),
                      terminal(c.batch_size or "–"), terminal(c.why))
    console.print(table)
    if verdict.speedup:
        sp = Table(title="speedup, head vs base", show_header=True, header_style="bold")
        for col in ("engine", "slice", "batch size", "context", "base", "head", "change (95% CI)", "cause"):
            sp.add_column(col, overflow="fold")
        for c in verdict.speedup:
            sp.add_row(*(terminal(x) for x in (c.engine, c.slice or "–", c.batch_size, c.bucket or "–",
                                               times(c.base.estimate), times(c.head.estimate))),
                       terminal(f"{_change(c)} {MARK_WORDS[c.mark()]}", style.get(c.status, "")),
                       terminal(c.explanation.sentence if c.explanation else "–"))
        console.print(sp)
    if verdict.traffic:
        tr = Table(title="latency speedup per request rate, head vs base", show_header=True, header_style="bold")
        for col in ("engine", "rate (req/s)", "base", "head", "change (95% CI)"):
            tr.add_column(col, overflow="fold")
        for c in verdict.traffic:
            tr.add_row(*(terminal(x) for x in (c.engine, f"{c.rate:g}", times(c.base.estimate),
                                               times(c.head.estimate))),
                       terminal(_change(c), style.get(c.status, "")))
        console.print(tr)


def _change(c) -> str:
    """A speedup change as the terminal shows it: the head/base ratio minus one, with its 95% CI."""
    def pct(x):
        return signed_pct(x - 1 if x is not None else None)

    return f"{pct(c.ratio.estimate)} ({pct(c.ratio.low)} to {pct(c.ratio.high)})"


# --- the chart ----------------------------------------------------------------------------------


def _errorbars(ax, xs, cis, label, **style) -> None:
    est = [ci.estimate for ci in cis]
    lo = [max(0.0, ci.estimate - ci.low) if ci.n > 1 else 0 for ci in cis]
    hi = [max(0.0, ci.high - ci.estimate) if ci.n > 1 else 0 for ci in cis]
    ax.errorbar(xs, est, yerr=[lo, hi], marker="o", capsize=3, label=label, **style)


def write_png(checks: ChecksDoc, path: Path) -> str | None:
    """speedup.png: per engine, speedup vs batch size per slice with CI bars, and (``checks.traffic``) the latency
    speedup vs request rate per slice. Returns a note when it cannot be drawn."""
    engines = checks.speedup.engines if checks.speedup else {}
    traffic = checks.traffic.engines if checks.traffic else {}
    names = list(dict.fromkeys([*engines, *traffic]))
    if not names:  # before matplotlib's import (most of a second of CPU), which an untimed run never needs
        return "speedup.png skipped: the run has no timing"
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "speedup.png skipped: install the plot extra (pip install 'specguard[plot]') for the chart"
    charts = [(n, "batch") for n in names if n in engines] + [(n, "rate") for n in names if n in traffic]
    fig, axes = plt.subplots(1, len(charts), figsize=(6 * len(charts), 4), squeeze=False)
    for ax, (engine, kind) in zip(axes[0], charts):
        if kind == "batch":
            for slc, rows in sorted(engines[engine].by_slice.items()):
                sizes = sorted(rows, key=int)
                _errorbars(ax, [int(b) for b in sizes], [rows[b].speedup for b in sizes], slc)
            ax.set_xlabel("batch size (load)")
            ax.set_title(f"{engine}: median speedup, 95% CI")
        else:
            t = traffic[engine]
            rows = sorted(t.rates.values(), key=lambda r: r.rate)
            slices = sorted({s for r in rows for s in r.by_slice})
            for slc in slices:
                have = [r for r in rows if slc in r.by_slice]
                _errorbars(ax, [r.rate for r in have], [r.by_slice[slc] for r in have], slc)
            have = [r for r in rows if r.speedup is not None]
            _errorbars(ax, [r.rate for r in have], [r.speedup for r in have], "all requests", color="black",
                       linewidth=2)
            if t.crossover.interpolated:
                ax.axvline(t.crossover.interpolated, color="red", linestyle=":", linewidth=1,
                           label=f"crossover ~{t.crossover.interpolated:.2g} req/s")
            ax.set_xscale("log")
            ax.set_xticks([r.rate for r in rows], [f"{r.rate:g}" for r in rows])
            ax.minorticks_off()
            ax.set_xlabel(f"request rate (req/s, {checks.traffic.arrival} arrivals)")
            ax.set_title(f"{engine}: latency speedup per request, 95% CI")
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
        ax.set_ylabel("speedup vs non-speculative (x)")
        ax.legend(fontsize="small")
    fig.tight_layout()
    import io

    from gate.io.files import atomic_write_bytes

    png = io.BytesIO()  # drawn in memory, then written like every output: atomically, a failure naming the file
    fig.savefig(png, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(path, png.getvalue())
    return None


# --- the checks' full text (checks.md of `specguard check`, the details of the step summary) -------


def render_text(results: Results, checks: ChecksDoc) -> str:
    """``checks.md`` as ``specguard check`` writes it: a title with the checks' outcome, then the details."""
    return _render_checks("checks.md.j2", results, checks)


def render_details(results: Results, checks: ChecksDoc) -> str:
    """The checks' full text without its title: the step summary's least important section."""
    return _render_checks("checks_details.md.j2", results, checks)


def _render_checks(template: str, results: Results, checks: ChecksDoc) -> str:
    failed = checks.failing()
    doc = results.model_dump(mode="json", by_alias=True, exclude={"executions", "prompts", "batches"})
    return environment().get_template(template).render(
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
