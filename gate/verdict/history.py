"""``specguard baseline history``: how speedup and acceptance per slice moved across baseline refreshes."""

from __future__ import annotations

import statistics
from collections import defaultdict

from gate.verdict.baseline import Baseline


def _speedup_by_slice(b: Baseline, engine: str) -> dict[tuple[str, int], float]:
    """Median of the paired speedup samples of each slice at each batch size (all context buckets pooled)."""
    pooled: dict[tuple[str, int], list[float]] = defaultdict(list)
    for cell in b.speedup.get(engine, {}).values():
        pooled[(cell.slice or "?", cell.batch_size)] += cell.samples
    return {k: statistics.median(v) for k, v in pooled.items() if v}


def render_history(docs: list[Baseline]) -> str:
    """One table per hardware key and engine: rows are slices, columns are refreshes, oldest first."""
    out = []
    by_hw: dict[str, list[Baseline]] = defaultdict(list)
    for d in docs:
        by_hw[d.hardware_key].append(d)
    for hw, mine in sorted(by_hw.items()):
        mine.sort(key=lambda d: d.created_utc)
        dates = [d.created_utc[:10] + (" (forced)" if d.forced else "") for d in mine]
        out.append(f"baseline {mine[0].name} on {hw}: {len(mine)} refresh(es)")
        engines = sorted({e for d in mine for e in d.acceptance} | {e for d in mine for e in d.speedup})
        for engine in engines:
            rows: dict[str, list[str]] = {}
            for i, d in enumerate(mine):
                per_bs = d.acceptance.get(engine, {})
                if per_bs:
                    bs = min(per_bs, key=int)
                    for slc, fig in per_bs[bs].items():
                        label = f"acceptance  {'all slices' if slc == '*' else slc} (bs {bs})"
                        rows.setdefault(label, ["–"] * len(mine))[i] = \
                            "–" if fig.mean_accepted_length is None else f"{fig.mean_accepted_length:.2f}"
                for (slc, bs), v in sorted(_speedup_by_slice(d, engine).items()):
                    rows.setdefault(f"speedup     {slc} (bs {bs})", ["–"] * len(mine))[i] = f"{v:.2f}x"
            if not rows:
                continue
            width = max(len(k) for k in rows) + 2
            out.append(f"  {engine}")
            out.append("    " + " " * width + "  ".join(f"{d:>12}" for d in dates))
            for label, vals in sorted(rows.items()):
                out.append(f"    {label:<{width}}" + "  ".join(f"{v:>12}" for v in vals))
        out.append("")
    return "\n".join(out).rstrip()


def history_of(name: str, root: str | None, config: str | None, hardware: str | None) -> str:
    """``specguard baseline history``: the trend of one baseline name (under ``root``, else the config's
    baseline.dir, else ./baselines), for one hardware key or all."""
    from gate.errors import Problem, SpecguardError
    from gate.verdict.store import BaselineStore, baselines_root

    store = BaselineStore(baselines_root(root, config), name)
    docs = store.history(hardware)
    if not docs:
        raise SpecguardError(Problem(str(store.dir), f"no baselines named {name!r}",
                                     hint="refresh one first: `specguard baseline refresh CONFIG --from RUN_DIR`"))
    return render_history(docs)
