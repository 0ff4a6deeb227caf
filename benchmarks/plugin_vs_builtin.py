"""The plug-in path measures what the built-in path does: the demo pair through the gate's own engine, and through
the same engine wrapped as a plug-in (examples/builtin_plugin.py) timed against its own plain decoding
(``engines[].reference: {num_draft_tokens: 0}``), in one run, on the same batches.

Prints, per load level, each path's speedup with its 95% CI, and whether the two intervals overlap.  Run it alone
(2 cores, no other torch process):

    python benchmarks/plugin_vs_builtin.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from gate.cli import main as specguard

ROOT = Path(__file__).resolve().parents[1]
CONFIG = f"""\
version: 1
models:
  target: {{path: "specguard:demo/target"}}
  draft: {{path: "specguard:demo/draft"}}
  device: cpu
batching: {{batch_sizes: [1, 4, 8], compositions: 1}}
generation: {{max_new_tokens: 32}}
suite: {{max_prompts_per_slice: 3}}
engines:
  - {{type: speculative}}
  - {{type: plugin, name: builtin-plugin, callable: "builtin_plugin:generate", reference: {{num_draft_tokens: 0}},
     pythonpath: ["{ROOT / 'examples'}"]}}
checks:
  speedup: {{time_budget_s: 40, min_repeats: 3, max_repeats: 12, warmup: 1}}
output: {{cache_dir: null}}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "specguard.yaml"
        cfg.write_text(CONFIG)
        code = specguard(["run", str(cfg), "--out", f"{tmp}/out", "--threads", "2", "-q"])
        code = code or specguard(["check", str(cfg), "--out", f"{tmp}/out", "-q"])
        checks = json.loads((Path(tmp) / "out" / "checks.json").read_text())
    engines = checks["speedup"]["engines"]
    rows = []
    for bs in sorted(engines["speculative"]["load_curve"], key=int):
        a = engines["speculative"]["load_curve"][bs]["speedup"]
        b = engines["builtin-plugin"]["load_curve"][bs]["speedup"]
        rows.append({"batch_size": int(bs), "builtin": a, "plugin": b,
                     "overlap": a["low"] <= b["high"] and b["low"] <= a["high"]})
        print(f"bs {bs}: built-in {a['estimate']:.2f}x ({a['low']:.2f}-{a['high']:.2f}), plug-in against its own "
              f"reference {b['estimate']:.2f}x ({b['low']:.2f}-{b['high']:.2f}), CIs overlap: {rows[-1]['overlap']}")
    print(f"exit code of run/check: {code}; judged against: {engines['builtin-plugin'].get('against')}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
