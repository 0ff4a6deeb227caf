"""Synthetic runs for the comparison and the report: valid results and checks documents with chosen
acceptance and speedup per cell, so each verdict rule can be driven exactly, with no model loaded."""

from __future__ import annotations

import copy
import json

from gate.checks import reproducibility
from gate.checks.doc import ChecksDoc, EquivalenceSummary
from gate.checks.equivalence import _verdicts as equivalence_verdicts
from gate.checks.speedup import analyze_speedup, verdicts_for
from gate.inputs.config import Config
from gate.run.results import Results

SLICES = ("code", "prose")
SIZES = (1, 4)
K = 4
HW_A = {"device_type": "cpu", "cpu": "Test CPU", "cpu_count": 2, "torch_threads": 2, "machine": "x86_64"}
HW_B = {"device_type": "cuda", "cpu": "Test CPU", "cpu_count": 16, "torch_threads": 16, "machine": "x86_64",
        "gpu": "NVIDIA H100 80GB HBM3"}


def config(**baseline) -> Config:
    return Config.model_validate({"models": {"target": {"path": "org/target"}, "draft": {"path": "org/draft"}},
                                  "batching": {"batch_sizes": list(SIZES)}, "baseline": {"name": "demo", **baseline},
                                  "generation": {"max_new_tokens": 8}})


def _counters(accepted_per_step: int, steps: int = 4) -> dict:
    return {"num_drafts": steps, "num_draft_tokens": K * steps, "num_accepted_tokens": accepted_per_step * steps,
            "num_accepted_tokens_per_pos": [steps if j < accepted_per_step else 0 for j in range(K)],
            "num_draft_tokens_per_pos": [steps] * K, "num_target_forwards": steps, "num_draft_forwards": K * steps,
            "num_emitted_tokens": (accepted_per_step + 1) * steps}


def _hub_fingerprint(hub_id: str) -> str:
    import hashlib

    return hashlib.sha256(f"torch.float32{hub_id}@main".encode()).hexdigest()[:16]  # gate.inputs.models, a hub id


def _digest(cfg: Config) -> str:
    return cfg.digest()


def _suite_fingerprint() -> str:
    from gate.inputs.suite import load_suite

    return load_suite("gate/suites/default.jsonl").fingerprint()


def run(accepted: dict | None = None, speedup: dict | None = None, hardware: dict | None = None,
        prompt_ids: tuple = ("code-0", "code-1", "prose-0", "prose-1"), repeats: int = 6,
        cost_ratio: float = 0.1, verify_ratio: float = 1.2) -> Results:
    """accepted: {(slice, bs): accepted drafts per step} (default 2); speedup: {(slice, bs): median ratio}
    (default 1.5); each timing cell gets ``repeats`` paired samples spread +-2% around its median."""
    accepted = accepted or {}
    speedup = speedup or {}
    cfg = config()
    hw = hardware or HW_A
    from gate.inputs.fingerprint import hardware_key

    prompts = [{"id": pid, "slice": SLICES[i // 2], "bucket": "0-127", "n_prompt_tokens": 3, "max_new_tokens": 8,
                "prompt_ids": [i + 1, 2, 3]} for i, pid in enumerate(prompt_ids)]
    slice_of = {p["id"]: p["slice"] for p in prompts}
    tokens = [5, 6, 7, 8, 9, 10, 11, 12]
    execs = []

    def seq(pid, engine, bs):
        c = _counters(accepted.get((slice_of[pid], bs), 2)) if engine != "reference" else None
        return {"prompt_id": pid, "token_ids": tokens, "stop_reason": "max_tokens", "wall_s": 1.0, "counters": c,
                "text": "five six"}

    for bs in SIZES:
        for engine in ("reference", "speculative"):
            for b in range(0, len(prompts), bs):
                members = [p["id"] for p in prompts[b:b + bs]]
                execs.append({"phase": "outputs", "engine": engine, "mode": "greedy", "batch_size": bs,
                              "batch": b // bs, "prompts": members, "n_real": len(members), "wall_s": 1.0,
                              "sequences": [seq(pid, engine, bs) for pid in members]})
    timing = {}
    for bs in SIZES:
        for slc in SLICES:
            members = [p["id"] for p in prompts if p["slice"] == slc][:bs]
            members = (members * bs)[:bs]
            median = speedup.get((slc, bs), 1.5)
            for r in range(repeats):
                spread = 1 + 0.02 * ((r % 3) - 1)
                for engine, wall in (("reference", 1.0), ("speculative", 1.0 / (median * spread))):
                    execs.append({"phase": "timing", "engine": engine, "mode": "greedy", "batch_size": bs,
                                  "batch": SLICES.index(slc), "repeat": r, "slice": slc, "bucket": "0-127",
                                  "prompts": members, "n_real": len(set(members)), "wall_s": wall,
                                  "sequences": [{**seq(pid, engine, bs), "filler": i >= len(set(members))}
                                                for i, pid in enumerate(members)]})
            timing.setdefault(str(bs), {})[f"{slc}|0-127"] = {"repeats": repeats, "stopped_by": "max_repeats"}
    return Results.model_validate({
        "schema": "specguard.results/2", "status": "complete",
        "fingerprint": {"hardware": hw, "hardware_key": hardware_key(hw),
                        "libraries": {"specguard": "0.1.0", "torch": "2.13.0", "transformers": "5.24.0",
                                      "python": "3.11.7"},
                        # what the config's own models and suite fingerprint to (gate.inputs.identity): a synthetic
                        # run belongs to config() as a real run belongs to its config
                        "models": {role: {"location": f"org/{role}", "fingerprint": _hub_fingerprint(f"org/{role}"),
                                          "dtype": "float32"} for role in ("target", "draft")},
                        "config": _digest(cfg),
                        "suite": {"name": "/runner/work/repo/mini.jsonl", "fingerprint": _suite_fingerprint(),
                                  "prompts": len(prompts), "slices": list(SLICES)}},
        "settings": {"num_draft_tokens": K, "batch_sizes": list(SIZES), "max_new_tokens": 8, "eos_token_ids": [],
                     "greedy": True, "engines": ["speculative"], "engine_version": "test"},
        "config": cfg.model_dump(mode="json"),
        "prompts": prompts,
        "calibration": {str(bs): {"cost_ratio": cost_ratio, "verify_ratio": verify_ratio} for bs in SIZES},
        "calibrated_engines": ["speculative"], "timing": timing, "executions": execs})


def _summary(n: int, exact: float, near: int = 0, confident: int = 0, examples=None) -> EquivalenceSummary:
    return EquivalenceSummary.model_validate({
        "sequences": n, "exact_match": exact, "prefix_match": exact, "consistent_share": 1.0,
        "confident_inconsistencies": confident, "divergences": {"near_tie": near, "confident": confident, "length": 0},
        "signatures": {}, "compositions": 1, "by_slice": {}, "examples": examples or [],
        "sequences_with_signatures": [], "first_inconsistencies": []})


def checks_for(results: Results, exact: dict | None = None, confident: dict | None = None,
               examples: list | None = None) -> ChecksDoc:
    """A checks document as `specguard check` would write it, with chosen equivalence figures per batch size."""
    exact = exact or {}
    confident = confident or {}
    cfg = config()
    n = len(results.prompts)
    equivalence = {"speculative": {}}
    verdicts = []
    for bs in SIZES:
        s = _summary(n, exact.get(bs, 1.0), confident=confident.get(bs, 0),
                     examples=copy.deepcopy(examples) if examples and confident.get(bs) else [])
        equivalence["speculative"][str(bs)] = s
        verdicts += [v.model_dump() for v in equivalence_verdicts("speculative", bs, s, cfg.checks.equivalence)]
    repro = reproducibility.measure(results, None)
    speed = analyze_speedup(results, 200)
    verdicts += [v.model_dump() for v in verdicts_for(speed, None)]
    doc = {"schema": "specguard.checks/2", "run": results.ref(), "results_digest": results.digest,
           "results_status": results.status, "equivalence": equivalence,
           "noise_floor": {"4": _summary(n, 1.0)}, "reproducibility": repro, "speedup": speed,
           "tolerance": {"dtype": "float32", "eps": 1.1920928955078125e-07, "measured_noise": 1e-6, "fixed": None,
                         "noise_factor": 4.0, "ulp_factor": 2.0,
                         "rule": "max(4 x measured noise, 2 x ULP of |max logit| in float32)"},
           "verdicts": verdicts, "analysis_s": 1.0, "rescoring_forwards": 1}
    return ChecksDoc.model_validate(doc)  # the real schema: a document it would refuse would test nothing real


HOSTILE = "</details><img src=x onerror=alert(1)> @org/team #1 | `rm -rf /` [x](http://evil)"


def results_json(results: Results) -> str:
    """``results.json`` as the gate writes it: the bytes whose digest checks.json names."""
    from gate.io.documents import serialized

    return serialized(results).decode("utf-8")


def checks_json(doc: ChecksDoc) -> str:
    """``checks.json`` as the gate writes it (non-finite numbers kept, as ``json`` writes them)."""
    return json.dumps(doc.model_dump(mode="json", by_alias=True), indent=1) + "\n"


def judge(results: Results, checks: ChecksDoc, cfg: Config, baseline=None, baseline_path: str = "",
          same_hardware: bool = True, others: tuple = (), name: str = "demo", rules=None):
    """The judge as the pipeline calls it: the run summarized once, then held against ``baseline`` (under
    ``rules``, else the config's ``baseline.*``)."""
    from gate.verdict.judge import judge as judge_
    from gate.verdict.store import Stored
    from gate.verdict.summary import summarize

    stored = Stored(baseline, baseline_path, name, same_hardware, tuple(others))
    return judge_(summarize(results, checks, cfg, name), stored, rules or cfg.baseline)


def baseline_of(results: Results, checks: ChecksDoc, cfg: Config, name: str = "demo",
                created: str = "2026-12-01T00:00:00Z", force_reason: str | None = None):
    """The baseline a refresh of this run writes (the clock given, never read)."""
    from gate.verdict.baseline import derive, failing_checks, hardware_of, measure

    return derive(measure(results, checks, cfg), name=name, hardware_key=results.fingerprint.hardware_key,
                  hardware=hardware_of(results), status=results.status, failing=failing_checks(checks),
                  created_utc=created, source={}, force_reason=force_reason)
