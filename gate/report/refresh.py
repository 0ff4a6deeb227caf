"""The body of a baseline-refresh pull request: what changed per slice (acceptance, speedup, exact match), old to
new, and the history."""

from __future__ import annotations

from gate.numbers import num, pct, times
from gate.report.inert import markdown as inline
from gate.verdict.baseline import Baseline


def _slice_rows(old: Baseline | None, new: Baseline) -> list[str]:
    rows = []
    for engine, per_bs in sorted(new.acceptance.items()):
        for bs, per_slice in sorted(per_bs.items(), key=lambda kv: int(kv[0])):
            for slc, fig in sorted(per_slice.items()):
                if slc == "*":
                    continue
                before = old.acceptance.get(engine, {}).get(bs, {}).get(slc) if old else None
                sp_new = _pooled(new, engine, slc, int(bs))
                sp_old = _pooled(old, engine, slc, int(bs)) if old else None
                mal_old = before.mean_accepted_length if before else None
                rows.append(f"| {inline(engine)} | {inline(slc)} | {bs} | {num(mal_old)} → "
                            f"{num(fig.mean_accepted_length)} | {times(sp_old)} → {times(sp_new)} |")
    return rows


def _pooled(b: Baseline | None, engine: str, slc: str, bs: int) -> float | None:
    import statistics

    if b is None:
        return None
    samples = [x for c in b.speedup.get(engine, {}).values() if c.slice == slc and c.batch_size == bs
               for x in c.samples]
    return statistics.median(samples) if samples else None


def refresh_message(new: Baseline) -> str:
    """The refresh commit's message: which baseline, for which hardware, and why (the reason given)."""
    message = f"specguard: refresh baseline {new.name} for {new.hardware_key}"
    if new.reason or new.forced:
        message += f"\n\nReason: {' '.join((new.forced.reason if new.forced else new.reason).split())}"
    return message


def refresh_body(old: Baseline | None, new: Baseline, history: str) -> str:
    lines = [f"Refreshes baseline `{inline(new.name)}` for `{inline(new.hardware_key)}` from workflow run "
             f"{inline(new.source.get('run_id') or 'local')} (commit {inline(new.source.get('commit') or '?')}).", ""]
    if new.forced:
        lines += [f"**Forced:** {inline(new.forced.reason)} (failing: {inline(', '.join(new.forced.failing))})", ""]
    elif new.reason:
        lines += [f"**Reason:** {inline(new.reason)}", ""]
    if old is None:
        lines += ["There was no baseline for this hardware before.", ""]
    lines += ["| engine | slice | batch size | mean acceptance length, old → new | speedup, old → new |",
              "|---|---|---|---|---|", *_slice_rows(old, new), ""]
    eq = []
    for e, rows in sorted(new.equivalence.items()):
        for bs, fig in rows.items():
            before = old.equivalence.get(e, {}).get(bs) if old else None
            eq.append(f"| {inline(e)} | {bs} | {pct(before.exact_match if before else None)} → "
                      f"{pct(fig.exact_match)} |")
    if eq:
        lines += ["| engine | batch size | identical to the reference, old → new |", "|---|---|---|", *eq, ""]
    lines += ["<details><summary>History</summary>", "", "```", history.replace("```", "ʼʼʼ"), "```", "",
              "</details>", "", "A PR opened with the workflow's `GITHUB_TOKEN` does not trigger workflows: close "
              "and reopen it, or use a GitHub App token or a fine-grained PAT (see the Action's README), so the "
              "gate runs on it.", ""]
    return "\n".join(lines)
