"""The demo pair behind OpenVINO GenAI's ContinuousBatchingPipeline: install, IR export, gate config, cross-checks.

Everything lands in ``$SPECGUARD_OPENVINO_CACHE/<openvino-genai version>/`` (default
``~/.cache/specguard-openvino/2026.4.1.0/``), never in the repository:

    export-venv/     optimum-cli's own venv (optimum-intel 2.2 wants transformers < 5.6; the main .venv has 5.24)
    ir/target/       the demo target in OpenVINO IR, fp32 weights, with its OpenVINO tokenizer and detokenizer
    ir/draft/        the demo draft, the same way

    python scripts/openvino_demo.py install      # openvino-genai into this interpreter's venv, torch untouched
    python scripts/openvino_demo.py export       # the export venv and the two IR folders (warm: a no-op)
    python scripts/openvino_demo.py config OUT   # a specguard.yaml gating examples/openvino_engine.py
    python scripts/openvino_demo.py info         # what the library does by default here (precision, scheduler)
    python scripts/openvino_demo.py greedy       # OpenVINO's plain and speculative greedy vs transformers fp32
    python scripts/openvino_demo.py table RUN... # the results table of gate runs

**The export venv.**  optimum-intel 2.2 lists ``torchvision`` as a hard dependency; beside the CPU build of torch
that would pull a CUDA torch (or break imports), and nothing in a causal-LM export imports it.  So optimum-intel is
installed with ``--no-deps`` and its real dependencies are named here, ``torch==2.13.0`` among them (the CPU wheel
served locally for exactly that version), and the venv is checked to hold no torchvision.  nncf is left out: it is
only needed to compress weights, and the export asks for fp32 (the demo checkpoints are stored in bf16; the IR is
exported in fp32).

**The tokenizer.**  The engine sends and reads token ids, but ``ContinuousBatchingPipeline`` with a draft model
asserts that the target and draft tokenizers are equal by *encoding a test string* with each, so both IR folders
need ``openvino_tokenizer.xml``: optimum-cli converts the tokenizer with openvino-tokenizers (installed in the
export venv) by default, and the export is refused if the files are missing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "gate" / "demo"
VERSION = os.environ.get("OPENVINO_GENAI_VERSION", "2026.4.1.0")
OPENVINO = "2026.4.1"  # the openvino and openvino-tokenizers releases openvino-genai 2026.4.1.0 is built against
CACHE = Path(os.environ.get("SPECGUARD_OPENVINO_CACHE", Path.home() / ".cache" / "specguard-openvino")) / VERSION
EXPORT_VENV = CACHE / "export-venv"
IR = CACHE / "ir"
MODELS = ("target", "draft")
# The main venv: openvino-genai and exactly its runtime dependencies (numpy is already there), nothing else.
MAIN_PACKAGES = [f"openvino-genai=={VERSION}", f"openvino-tokenizers=={VERSION}", f"openvino=={OPENVINO}",
                 "openvino-telemetry>=2023.2.1"]
# The export venv: optimum-intel 2.2.0 (--no-deps) and its dependencies minus torchvision and nncf, torch pinned.
EXPORT_TORCH = "torch==2.13.0"
EXPORT_PACKAGES = [EXPORT_TORCH, "optimum==2.3.0", "transformers>=4.51,<5.6", "huggingface-hub>=0.23.2,<1.22",
                   f"openvino=={OPENVINO}", f"openvino-tokenizers=={VERSION}", "requests>=2.33,<3", "setuptools"]
EXPORT_NO_DEPS = ["optimum-intel==2.2.0"]
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def run(cmd: list[str], env: dict | None = None, quiet: bool = True) -> str:
    proc = subprocess.run(cmd, env={**os.environ, **(env or {})}, capture_output=quiet, text=True)
    if proc.returncode:
        sys.exit(f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{(proc.stderr or '')[-4000:]}")
    return proc.stdout or ""


def dist_version(name: str, python: str | None = None) -> str | None:
    """An installed distribution's version, in this interpreter or another one; None when it is not there."""
    code = ("import importlib.metadata as m, sys\ntry: print(m.version(sys.argv[1]))\n"
            "except m.PackageNotFoundError: print('')")
    out = subprocess.run([python or sys.executable, "-c", code, name], capture_output=True, text=True).stdout.strip()
    return out or None


def ir_dir(model: str) -> Path:
    return IR / model


def ir_ready(model: str) -> bool:
    d = ir_dir(model)
    return all((d / f).is_file() for f in ("openvino_model.xml", "openvino_model.bin", "openvino_tokenizer.xml",
                                              "openvino_detokenizer.xml", "specguard-export.json"))


def install(_args) -> None:
    """openvino-genai (pinned) into this interpreter's venv with --no-deps: torch and transformers stay as they are."""
    if dist_version("openvino-genai") == VERSION and dist_version("openvino") == OPENVINO:
        print(f"openvino-genai {VERSION}: installed in {sys.prefix}")
        return
    before = {p: dist_version(p) for p in ("torch", "transformers", "numpy", "tokenizers")}
    t0 = time.perf_counter()
    run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", *MAIN_PACKAGES])
    after = {p: dist_version(p) for p in before}
    if after != before:
        sys.exit(f"installing openvino-genai changed {before} into {after}")
    code = "import openvino_genai as g, openvino as ov; print(g.__version__, ov.__version__)"
    print(f"openvino-genai installed in {sys.prefix} in {time.perf_counter() - t0:.1f} s: "
          f"{run([sys.executable, '-c', code]).strip()}; unchanged: {after}")


def export_venv() -> Path:
    python = EXPORT_VENV / "bin" / "python"
    stamp = EXPORT_VENV / ".specguard-ready"
    if stamp.is_file():
        return python
    t0 = time.perf_counter()
    if not python.exists():
        run([sys.executable, "-m", "venv", str(EXPORT_VENV)])
    pip = [str(python), "-m", "pip", "install", "--quiet"]
    run([*pip, *EXPORT_PACKAGES])
    run([*pip, "--no-deps", *EXPORT_NO_DEPS])
    torch, vision = dist_version("torch", str(python)), dist_version("torchvision", str(python))
    if vision is not None or not (torch or "").startswith("2.13.0"):
        sys.exit(f"{EXPORT_VENV}: torch {torch}, torchvision {vision}: expected the CPU torch 2.13.0 and no "
                 "torchvision")
    versions = {p: dist_version(p, str(python)) for p in ("optimum-intel", "optimum", "transformers", "torch",
                                                           "openvino", "openvino-tokenizers")}
    stamp.write_text(json.dumps(versions, indent=1) + "\n")
    print(f"{EXPORT_VENV}: {versions} in {time.perf_counter() - t0:.1f} s")
    return python


def weight_types(xml: Path) -> dict[str, int]:
    """Element counts of the IR's floating-point constants, by type (fp32 export: f32 only)."""
    import openvino as ov

    counts: dict[str, int] = {}
    for op in ov.Core().read_model(xml).get_ops():
        if op.get_type_name() == "Constant" and op.get_element_type().is_real():
            n = 1
            for d in op.get_output_shape(0):
                n *= d
            t = op.get_element_type().get_type_name()
            counts[t] = counts.get(t, 0) + n
    return counts


def export(_args) -> None:
    """The demo target and draft to OpenVINO IR with optimum-cli, in fp32, each with its OpenVINO tokenizer."""
    if all(ir_ready(m) for m in MODELS):
        print(f"{IR}: target and draft exported")
        return
    python = export_venv()
    for model in MODELS:
        out = ir_dir(model)
        if ir_ready(model):
            print(f"{out}: exists")
            continue
        tmp = out.with_name(model + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        t0 = time.perf_counter()
        run(["nice", "-n", "10", str(python.parent / "optimum-cli"), "export", "openvino", "--model",
             str(DEMO / model), "--task", "text-generation-with-past", "--library", "transformers",
             "--weight-format", "fp32", str(tmp)], env=OFFLINE)
        seconds = time.perf_counter() - t0
        missing = [f for f in ("openvino_model.xml", "openvino_tokenizer.xml", "openvino_detokenizer.xml")
                   if not (tmp / f).is_file()]
        if missing:
            sys.exit(f"{tmp}: the export wrote no {', '.join(missing)}: the speculative pipeline needs the "
                     "OpenVINO tokenizer of both models (see this script's docstring)")
        info = {"model": str(DEMO / model), "seconds": round(seconds, 1), "weight_elements": weight_types(
            tmp / "openvino_model.xml"), "export_venv": json.loads((EXPORT_VENV / ".specguard-ready").read_text())}
        (tmp / "specguard-export.json").write_text(json.dumps(info, indent=1) + "\n")
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
        print(f"{out}: {seconds:.1f} s, weights {info['weight_elements']}")


def config(args) -> None:
    """A gate config: examples/openvino_engine.py (ContinuousBatchingPipeline + draft) against its own plain
    decoding (the same pipeline without the draft), judged against the gate's fp32 reference."""
    for m in MODELS:
        if not ir_ready(m):
            sys.exit(f"{ir_dir(m)} not found: run `make openvino` first")
    properties = json.loads(args.properties) if args.properties else {}
    sampling = (f"\n  sampling: {{temperature: 1.0, seed: 0, batch_sizes: [{args.sampling}]}}"
                if args.sampling else "")
    distribution = ("\n  distribution: {num_samples: 600, alpha: 0.01, power_trials: 20}" if args.sampling else "")
    extra = {"target_ir": str(ir_dir("target")), "draft_ir": str(ir_dir("draft")), "device": "CPU",
             "properties": properties}
    if args.scheduler:
        extra["scheduler"] = json.loads(args.scheduler)
    precision = computes_in(properties)
    text = f"""\
# Written by `python scripts/openvino_demo.py config` (make openvino): the demo pair in OpenVINO IR (fp32) behind
# OpenVINO GenAI {VERSION}'s ContinuousBatchingPipeline with a draft model, against the same pipeline without it.
# On this machine the pipeline computes in {precision}: {precision_source(properties)}.
# The plug-in reports that precision with every result; the gate judges OpenVINO's near-ties at its scale and at the
# noise measured on the pipeline's own plain decoding (engines[].reference). The gate's reference stays in float32.
version: 1
models:
  target: {{path: "specguard:demo/target", dtype: float32}}
  draft: {{path: "specguard:demo/draft", dtype: float32}}
  device: cpu
  local_weights: true
speculation: {{num_draft_tokens: {args.k}}}
batching: {{batch_sizes: [{args.batch_sizes}]}}
generation:
  max_new_tokens: {args.tokens}
  greedy: true{sampling}
suite: {{path: "specguard:suites/default.jsonl", max_prompts_per_slice: {args.per_slice}}}
checks:
  speedup: {{min_repeats: 3, max_repeats: 6, warmup: 1, time_budget_s: 30, max_batches_per_cell: 2}}{distribution}
output: {{dir: {args.out}, cache_dir: null}}
engines:
  - type: plugin
    name: {args.name}
    callable: "openvino_engine:generate"
    pythonpath: [{json.dumps(str(ROOT / "examples"))}]
    extra: {json.dumps(extra)}
    reference: {{num_draft_tokens: 0}}
"""
    if args.plain:  # OpenVINO's plain decoding judged as an engine of its own: is a divergence speculation's?
        text += f"""\
  - type: plugin
    name: {args.name}-plain
    callable: "openvino_engine:generate_plain"
    pythonpath: [{json.dumps(str(ROOT / "examples"))}]
    extra: {json.dumps(extra)}
    reference: {{num_draft_tokens: 0}}
"""
    Path(args.path).parent.mkdir(parents=True, exist_ok=True)
    Path(args.path).write_text(text)
    print(args.path)


def computes_in(properties: dict) -> str:
    """What the pipeline's matrix work runs in here, as examples/openvino_engine.py reports it."""
    import openvino as ov

    hint = properties.get("INFERENCE_PRECISION_HINT")
    return str(hint) if hint else ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT").to_string()


def precision_source(properties: dict) -> str:
    if properties.get("INFERENCE_PRECISION_HINT"):
        return "pinned by INFERENCE_PRECISION_HINT in extra.properties"
    return ("the CPU plugin's default INFERENCE_PRECISION_HINT\n"
            "# (`config --properties '{\"INFERENCE_PRECISION_HINT\": \"f32\"}'` pins f32)")


def info(_args) -> None:
    """The library's defaults on this machine: the CPU plugin's precisions for the target IR, the scheduler."""
    import openvino as ov
    import openvino_genai as ov_genai

    core = ov.Core()
    print(f"openvino {ov.__version__}, openvino-genai {ov_genai.__version__}")
    print("CPU:", core.get_property("CPU", "FULL_DEVICE_NAME"), core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    compiled = core.compile_model(core.read_model(ir_dir("target") / "openvino_model.xml"), "CPU")
    for p in ("INFERENCE_PRECISION_HINT", "KV_CACHE_PRECISION", "EXECUTION_MODE_HINT", "INFERENCE_NUM_THREADS",
              "DYNAMIC_QUANTIZATION_GROUP_SIZE"):
        try:
            print(f"  compiled target, default {p}: {compiled.get_property(p)}")
        except RuntimeError as exc:
            print(f"  {p}: not reported ({str(exc).splitlines()[0][:80]})")
    print("SchedulerConfig():", ov_genai.SchedulerConfig().to_string().replace("\n", " "))
    cfg = ov_genai.GenerationConfig()
    print(f"GenerationConfig(): top_k={cfg.top_k} top_p={cfg.top_p} min_p={cfg.min_p} eos={cfg.eos_token_id} "
          f"stop_token_ids={cfg.stop_token_ids} rng_seed={cfg.rng_seed}")


def greedy(args) -> None:
    """OpenVINO's greedy tokens (plain pipeline, and with the draft) against transformers' fp32 target, per prompt,
    at batch size 1 and in one batch of all prompts; the first differing position of each differing prompt."""
    import numpy as np
    import openvino as ov
    import openvino_genai as ov_genai
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gate.inputs.suite import load_suite

    tok = AutoTokenizer.from_pretrained(DEMO / "target")
    model = AutoModelForCausalLM.from_pretrained(DEMO / "target", dtype=torch.float32).eval()
    prompts = load_suite(ROOT / "gate" / "suites" / "default.jsonl").prompts
    per: dict[str, list] = {}
    for p in prompts:
        per.setdefault(p.slice, []).append(p)
    picked = [p for ps in per.values() for p in ps[: args.per_slice]]
    ids = [tok(p.text, add_special_tokens=False)["input_ids"] for p in picked]
    ref = []
    for x in ids:
        with torch.inference_mode():
            out = model.generate(torch.tensor([x]), max_new_tokens=args.tokens, do_sample=False, eos_token_id=2,
                                 pad_token_id=0, attention_mask=torch.ones(1, len(x), dtype=torch.long))
        ref.append(out[0, len(x):].tolist())
    properties = json.loads(args.properties) if args.properties else {}
    for speculative in (False, True):
        props = dict(properties)
        if speculative:
            props["draft_model"] = ov_genai.draft_model(str(ir_dir("draft")), "CPU")
        pipe = ov_genai.ContinuousBatchingPipeline(str(ir_dir("target")), ov_genai.SchedulerConfig(), "CPU", props)

        def cfg(k: int):
            c = ov_genai.GenerationConfig()
            c.max_new_tokens, c.eos_token_id, c.stop_token_ids, c.do_sample = args.tokens, 2, {2}, False
            if k:
                c.num_assistant_tokens = k
            return c

        for bs in (1, len(ids)):
            got = []
            t0 = time.perf_counter()
            for i in range(0, len(ids), bs):
                chunk = ids[i:i + bs]
                res = pipe.generate([ov.Tensor(np.asarray([x], dtype=np.int64)) for x in chunk],
                                    [cfg(args.k if speculative else 0) for _ in chunk])
                got += [list(r.m_generation_ids[0]) for r in res]
            wall = time.perf_counter() - t0
            diffs = []
            for p, a, b in zip(picked, got, ref):
                if a != b:
                    j = next(i for i, (x, y) in enumerate(zip(a + [None], b + [None])) if x != y)
                    diffs.append(f"{p.id}@{j}")
            name = f"{'speculative k=' + str(args.k) if speculative else 'plain'}, bs {bs}"
            print(f"{name}: {len(picked) - len(diffs)}/{len(picked)} identical to transformers fp32 greedy "
                  f"({wall:.1f} s); first differences: {diffs}")


def fmt(v) -> str:
    return f"{v:.3f}" if isinstance(v, (int, float)) else "–"


def table(args) -> None:
    """Per batch size: identical, near-ties, confident divergences, speedup against the own reference (95% CI),
    and the verdict lines that did not pass; from a gate run directory."""
    for run_dir in args.runs:
        checks = json.loads((Path(run_dir) / "checks.json").read_text())
        print(f"{run_dir}: {checks.get('equivalence_method')}")
        print("| engine | batch size | identical | near-ties | confident | unclassified | confident inconsistencies "
              "| speedup vs own reference (95% CI) | vs the gate's reference |")
        print("|---|---|---|---|---|---|---|---|---|")
        for engine, rows in (checks.get("equivalence") or {}).items():
            sp = checks["speedup"]["engines"].get(engine, {})
            for bs, s in sorted(rows.items(), key=lambda x: int(x[0])):
                row = (sp.get("load_curve") or {}).get(bs, {})
                ci = row.get("speedup") or {}
                vg = (sp.get("versus_gate") or {}).get(bs) or {}
                d = s["divergences"]
                print(f"| {engine} | {bs} | {s['exact_match']:.0%} ({s['sequences']}) | {d['near_tie']} | "
                      f"{d['confident']} | {d['unclassified']} | {s['confident_inconsistencies']} | "
                      f"{fmt(ci.get('estimate'))} ({fmt(ci.get('low'))}-{fmt(ci.get('high'))}) | "
                      f"{fmt(vg.get('estimate'))} |")
        for bs, s in (checks.get("noise_floor") or {}).items():
            print(f"noise floor, the gate's reference at bs {bs}: {s['exact_match']:.0%} identical, "
                  f"{s['divergences']}")
        for v in checks["verdicts"]:
            if v["status"] in ("fail", "warn"):
                print(f"  {v['status']}: {v['check']} {v.get('engine') or ''} {v.get('batch_size') or ''}: "
                      f"{v['why']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("install").set_defaults(fn=install)
    sub.add_parser("export").set_defaults(fn=export)
    c = sub.add_parser("config")
    c.add_argument("path")
    c.add_argument("--name", default="openvino")
    c.add_argument("--k", type=int, default=4)
    c.add_argument("--tokens", type=int, default=32)
    c.add_argument("--per-slice", type=int, default=3)
    c.add_argument("--batch-sizes", default="1, 4, 8")
    c.add_argument("--sampling", type=int, help="also sample at this batch size (the distribution test)")
    c.add_argument("--properties", help="OpenVINO properties for the pipeline, as JSON (default: none, the "
                                        "library's defaults), e.g. '{\"INFERENCE_PRECISION_HINT\": \"f32\"}'")
    c.add_argument("--scheduler", help="SchedulerConfig fields for the pipeline, as JSON (default: none, the "
                                       "library's), e.g. '{\"max_num_batched_tokens\": 8192}' (no split prefill)")
    c.add_argument("--out", default="out", help="the run directory, relative to the config")
    c.add_argument("--plain", action="store_true",
                   help="also judge the pipeline without the draft (engine <name>-plain) against the reference")
    c.set_defaults(fn=config)
    sub.add_parser("info").set_defaults(fn=info)
    g = sub.add_parser("greedy")
    g.add_argument("--tokens", type=int, default=32)
    g.add_argument("--per-slice", type=int, default=3)
    g.add_argument("--k", type=int, default=4)
    g.add_argument("--properties")
    g.set_defaults(fn=greedy)
    t = sub.add_parser("table")
    t.add_argument("runs", nargs="+")
    t.set_defaults(fn=table)
    args = ap.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
