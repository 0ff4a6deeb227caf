"""``specguard run``: generate with every engine at every batch size, and time it honestly.

Phases, in order:

1. **calibrate** — time one decode step of the target and of the draft at each
   batch size; their ratio is the cost ratio ``c`` of the speedup model.
2. **outputs** (greedy) — every engine on the whole suite at every batch size:
   the equivalence data.  The suite is cut into batches that each hold one
   *cell* (slice x context-length bucket), filled up to the batch size by
   repeating the cell's prompts.  Reference executions come from the cache when
   the target, prompts, settings and engine version are unchanged.
3. **timing** (greedy) — per batch size, up to ``max_batches_per_cell`` batches
   of each cell (evenly spread).  The reference and each speculative engine
   run every batch interleaved (A B, then B A on the next repeat, so linear drift
   hits both equally).  Every cell gets ``min_repeats``; then the cell whose
   speedup CI is widest gets one more repeat, until every cell is within
   ``ci_half_width`` or the batch size's share of ``time_budget_s`` (an equal
   split across batch sizes, counted from the start of that batch size) is spent.  Their outputs,
   compared with phase 2's, give run-to-run repeatability.  The reference cannot be cached here:
   an honest paired timing needs it measured now, beside the engine.
   Untimed runs (``timed=False``, used by the self-test) skip phases 1 and 3,
   and run phase 2 twice at the repeat batch size.
4. **canonical** — the reference at batch size 1, if 1 is not a configured size.
5. **sampling** — if configured: every speculative engine at each sampling
   batch size, and the reference (the control) at the first, passes with fresh
   per-prompt seeds until ``checks.distribution.num_samples`` tokens are collected.

Reference executions of phases 2, 4 and 5 are served from the reference cache
when the target, suite, settings and engine version are unchanged.

Every finished execution is appended to ``records.jsonl`` at once; the run can
be interrupted (Ctrl-C, SIGTERM from a cancelled job) and resumed.
"""

from __future__ import annotations

import hashlib
import signal
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from gate import fingerprint as fp
from gate.cache import ReferenceCache
from gate.config import LoadedConfig
from gate.engines import ENGINE_VERSION, Engine, GenerationSettings, Request
from gate.engines.layout import RaggedBatch, right_align
from gate.models import ModelPair
from gate.results import RECORDS, RESULTS, SCHEMA, RecordLog, atomic_write_json, read_records
from gate.stats import bootstrap_median_ci
from gate.suite import Suite
from gate.timing import Clock, Stopwatch


class Interrupted(Exception):
    """The run was asked to stop (SIGINT/SIGTERM)."""


@dataclass(frozen=True)
class PromptInfo:
    index: int
    id: str
    slice: str
    bucket: str
    prompt_ids: tuple[int, ...]
    max_new_tokens: int

    def to_dict(self) -> dict:
        return {"id": self.id, "slice": self.slice, "bucket": self.bucket,
                "n_prompt_tokens": len(self.prompt_ids), "max_new_tokens": self.max_new_tokens,
                "prompt_ids": list(self.prompt_ids)}


@dataclass(frozen=True)
class PlannedBatch:
    batch_size: int
    index: int
    slice: str
    bucket: str
    members: tuple[int, ...]  # prompt indices; the first n_real are the cell's own, the rest fill up
    n_real: int

    @property
    def cell(self) -> tuple[str, str]:
        return (self.slice, self.bucket)


def bucket_name(n_tokens: int, edges: list[int]) -> str:
    lo = 0
    for e in edges:
        if n_tokens < e:
            return f"{lo}-{e - 1}"
        lo = e
    return f"{lo}+"


def plan_batches(prompts: list[PromptInfo], batch_size: int) -> list[PlannedBatch]:
    """Cut the suite into batches of exactly ``batch_size``, one cell per batch."""
    cells: OrderedDict[tuple[str, str], list[int]] = OrderedDict()
    for p in prompts:
        cells.setdefault((p.slice, p.bucket), []).append(p.index)
    out = []
    for (slc, bucket), idx in cells.items():
        for start in range(0, len(idx), batch_size):
            real = idx[start:start + batch_size]
            fill = [idx[i % len(idx)] for i in range(batch_size - len(real))]
            out.append(PlannedBatch(batch_size, len(out), slc, bucket, tuple(real + fill), len(real)))
    return out


def prompt_seed(base: int, prompt_id: str, pass_index: int) -> int:
    h = hashlib.sha256(f"{base}:{prompt_id}:{pass_index}".encode()).digest()
    return int.from_bytes(h[:6], "little")


class Runner:
    def __init__(self, loaded: LoadedConfig, pair: ModelPair, suite: Suite, reference: Engine,
                 engines: list[Engine], out_dir: Path, log: Callable[[str], None] = print,
                 cache: ReferenceCache | None = None, timed: bool = True, repeat_runs: bool = True):
        self.loaded = loaded
        self.cfg = loaded.config
        self.pair = pair
        self.suite = suite
        self.reference = reference
        self.engines = engines  # speculative engines under test
        self.out_dir = Path(out_dir)
        self.say = log
        self.cache = cache
        self.timed = timed  # False: outputs only (no calibration, one pass per batch size)
        self.repeat_runs = repeat_runs
        self.records: list[dict] = []
        self.previous: dict[tuple, dict] = {}
        self.skipped: list[dict] = []
        self.reused: list[str] = []
        self.current: dict | None = None
        self.prompts = self._prompts()
        self.hardware = fp.hardware(pair.device)
        gen = self.cfg.generation
        self.greedy = GenerationSettings(0.0, self.cfg.speculation.num_draft_tokens,
                                         pair.eos_token_ids if gen.stop_at_eos else ())
        self.sampled = (GenerationSettings(gen.sampling.temperature, self.cfg.speculation.num_draft_tokens,
                                           self.greedy.eos_token_ids) if gen.sampling else None)

    # --- setup ----------------------------------------------------------------------------

    def _prompts(self) -> list[PromptInfo]:
        edges = list(self.cfg.checks.speedup.context_buckets)
        out = []
        for i, p in enumerate(self.suite.prompts):
            ids = tuple(self.pair.encode(p.text))
            max_new = p.max_new_tokens or self.cfg.generation.max_new_tokens
            out.append(PromptInfo(i, p.id, p.slice, bucket_name(len(ids), edges), ids, max_new))
        return out

    def header(self) -> dict:
        pair, cfg = self.pair, self.cfg
        hw = self.hardware
        models = {
            role: {"location": m.location, "fingerprint": m.fingerprint, "dtype": str(m.dtype).replace("torch.", ""),
                   "revision": m.spec.revision}
            for role, m in (("target", pair.target), ("draft", pair.draft))
        }
        settings = {
            "num_draft_tokens": cfg.speculation.num_draft_tokens,
            "batch_sizes": cfg.batching.batch_sizes,
            "max_new_tokens": cfg.generation.max_new_tokens,
            "eos_token_ids": list(self.greedy.eos_token_ids),
            "greedy": cfg.generation.greedy,
            "sampling": cfg.generation.sampling.model_dump() if cfg.generation.sampling else None,
            "engines": [e.name for e in self.engines],
            "engine_version": ENGINE_VERSION,
        }
        return {
            "schema": SCHEMA,
            "fingerprint": {
                "hardware": hw, "hardware_key": fp.hardware_key(hw), "libraries": fp.libraries(), "models": models,
                "config": fp.digest(cfg.model_dump(mode="json")),
                "suite": {"name": self.suite.name, "fingerprint": self.suite.fingerprint(),
                          "prompts": len(self.suite.prompts), "slices": self.suite.slices},
            },
            "settings": settings,
            "prompts": [p.to_dict() for p in self.prompts],
        }

    # --- running --------------------------------------------------------------------------

    @staticmethod
    def _key(rec: dict) -> tuple:
        return (rec["phase"], rec["engine"], rec["mode"], rec["batch_size"], rec["batch"], rec["repeat"])

    def execute(self, engine: Engine, phase: str, batch: PlannedBatch, repeat: int,
                settings: GenerationSettings, cache_key: str | None = None) -> dict:
        mode = "greedy" if settings.greedy else "sampling"
        key = (phase, engine.name, mode, batch.batch_size, batch.index, repeat)
        if key in self.previous:
            rec = self.previous.pop(key)
            self.records.append(rec)
            return rec
        self.current = {"phase": phase, "engine": engine.name, "mode": mode, "batch_size": batch.batch_size,
                        "batch": batch.index, "repeat": repeat}
        cached = self.cache.get(cache_key) if (self.cache and cache_key) else None
        if cached is not None:
            rec = {**cached, **self.current, "cached": True}
            self.reused.append(f"{phase}/{mode}/bs{batch.batch_size}/batch{batch.index}/r{repeat}")
        else:
            requests = [Request(self.prompts[i].prompt_ids, self.prompts[i].max_new_tokens,
                                prompt_seed(self._seed(), self.prompts[i].id, repeat)) for i in batch.members]
            result = engine.generate(requests, settings)
            rec = {
                "kind": "execution", **self.current, "slice": batch.slice, "bucket": batch.bucket,
                "temperature": settings.temperature, "prompts": [self.prompts[i].id for i in batch.members],
                "n_real": batch.n_real, "wall_s": result.wall_s, "realign_s": result.realign_s,
                "num_target_forwards": result.num_target_forwards,
                "num_draft_forwards": result.num_draft_forwards,
                "peak_memory_bytes": result.peak_memory_bytes,
                "sequences": [
                    {"prompt_id": self.prompts[i].id, "filler": j >= batch.n_real, "seed": req.seed,
                     "text": self.pair.decode(s.token_ids), **s.to_dict()}
                    for j, (i, req, s) in enumerate(zip(batch.members, requests, result.sequences))
                ],
            }
            if self.cache and cache_key:
                self.cache.put(cache_key, rec)
        self.log.append(rec)
        self.records.append(rec)
        self.current = None
        return rec

    def _seed(self) -> int:
        s = self.cfg.generation.sampling
        return s.seed if s else 0

    def _engines_at(self, batch_size: int, mode: str) -> list[Engine]:
        ok = []
        for e in self.engines:
            if e.max_batch_size is not None and batch_size > e.max_batch_size:
                reason = (f"{e.name} supports batch size {e.max_batch_size} only"
                          + (" (transformers' assisted generation)" if e.name == "hf_assisted" else ""))
                self.skipped.append({"engine": e.name, "batch_size": batch_size, "mode": mode, "reason": reason})
                self.say(f"  skip {e.name} at batch size {batch_size}: {reason}")
            else:
                ok.append(e)
        return ok

    def _reference_key(self, phase: str, batch: PlannedBatch, repeat: int, settings: GenerationSettings) -> str:
        t = self.pair.target
        return fp.digest({
            "target": t.fingerprint, "device": self.pair.device.type, "phase": phase,
            "hardware": fp.hardware_key(self.hardware),
            "prompts": [self.prompts[i].prompt_ids for i in batch.members],
            "max_new": [self.prompts[i].max_new_tokens for i in batch.members],
            "seeds": [prompt_seed(self._seed(), self.prompts[i].id, repeat) for i in batch.members],
            "settings": settings.to_dict(), "batch_size": batch.batch_size, "engine_version": ENGINE_VERSION,
            "n_real": batch.n_real, "attn": self.cfg.models.attn_implementation,
        })

    # --- phases ---------------------------------------------------------------------------

    def calibrate(self, warmup: int = 5, trials: int = 30) -> dict:
        """Median step times at each batch size (context 64 tokens), interleaved across models.

        ``cost_ratio`` is c of the speedup model: one draft decode step over one target
        decode step.  ``verify_ratio`` is one target step over k+1 tokens (what a
        verification costs) over one target decode step: the model assumes 1, and where
        it is not (compute-bound batches), speculation pays less.
        """
        out = {}
        clock = Clock(self.pair.device)
        width = self.cfg.speculation.num_draft_tokens + 1
        dev = self.pair.device
        for b in self.cfg.batching.batch_sizes:
            steps = {}
            with torch.inference_mode():
                for role, m in (("target", self.pair.target.model), ("draft", self.pair.draft.model)):
                    batch = RaggedBatch(m, b, dev, Stopwatch(clock))
                    ids, valid = right_align([[5] * 64] * b, dev)
                    batch.forward(ids, valid, logits_to_keep=1)
                    steps[role] = batch
                probes = {
                    "target_step_s": (steps["target"], 1), "draft_step_s": (steps["draft"], 1),
                    "target_verify_s": (steps["target"], width),
                }
                times: dict[str, list[float]] = {k: [] for k in probes}
                for i in range(warmup + trials):
                    for name, (batch, w) in probes.items():
                        ids = torch.full((b, w), 7, device=dev)
                        ok = torch.ones((b, w), dtype=torch.bool, device=dev)
                        start = batch.length
                        t0 = clock.now()
                        batch.forward(ids, ok, logits_to_keep=w)
                        elapsed = clock.now() - t0
                        batch.rollback(start, torch.zeros(b, dtype=torch.long, device=dev))  # fixed context
                        if i >= warmup:
                            times[name].append(elapsed)
            row = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
            row["cost_ratio"] = row["draft_step_s"] / row["target_step_s"]
            row["verify_ratio"] = row["target_verify_s"] / row["target_step_s"]
            out[str(b)] = row
        return out

    def timing_phase(self, settings: GenerationSettings) -> dict:
        # Each load level gets an equal share of the budget, so the first cannot starve the rest.
        share = self.cfg.checks.speedup.time_budget_s / len(self.cfg.batching.batch_sizes)
        return {str(b): self._time_batch_size(b, settings, share) for b in self.cfg.batching.batch_sizes}

    def _time_batch_size(self, b: int, settings: GenerationSettings, budget_s: float) -> dict:
        sp = self.cfg.checks.speedup
        started = time.monotonic()
        engines = [e for e in self.engines if e.max_batch_size is None or b <= e.max_batch_size]
        batches = plan_batches(self.prompts, b)
        cells: OrderedDict[tuple, list[PlannedBatch]] = OrderedDict()
        for pb in batches:
            cells.setdefault(pb.cell, []).append(pb)
        cap = sp.max_batches_per_cell
        for cell, members in cells.items():  # an evenly spread subset: timing needs fewer tokens than correctness
            if cap and len(members) > cap:
                cells[cell] = [members[round(i * (len(members) - 1) / (cap - 1))] if cap > 1 else members[0]
                               for i in range(cap)]
        batches = [pb for members in cells.values() for pb in members]
        self.say(f"timing at batch size {b}: {len(cells)} cells, {len(batches)} batches, "
                 f"engines: reference, {', '.join(e.name for e in engines) or '(none)'}")
        for e in [self.reference, *engines]:  # warm-up runs are not recorded
            for _ in range(sp.warmup if batches else 0):
                e.generate([Request(self.prompts[i].prompt_ids, self.prompts[i].max_new_tokens)
                            for i in batches[0].members], settings)
        ratios: dict[tuple, list[float]] = {c: [] for c in cells}
        repeats = dict.fromkeys(cells, 0)

        def one_repeat(cell: tuple) -> None:
            r = repeats[cell]
            for pb in cells[cell]:
                order = [self.reference, *engines]
                if r % 2:  # A B, then B A: linear drift hits both sides equally
                    order.reverse()
                recs = {e.name: self.execute(e, "timing", pb, r, settings) for e in order}
                for e in engines:
                    ratios[cell].append(recs[self.reference.name]["wall_s"] / recs[e.name]["wall_s"])
            repeats[cell] += 1

        def width(cell: tuple) -> float:
            return bootstrap_median_ci(ratios[cell], sp.bootstrap_resamples).rel_half_width if engines else 0.0

        for cell in cells:
            for _ in range(sp.min_repeats):
                one_repeat(cell)
        stop = {}
        while True:
            open_cells = [c for c in cells if width(c) > sp.ci_half_width and repeats[c] < sp.max_repeats]
            for c in cells:
                if c not in open_cells:
                    stop[c] = "precision" if width(c) <= sp.ci_half_width else "max_repeats"
            if not open_cells:
                break
            if time.monotonic() - started > budget_s:
                stop.update(dict.fromkeys(open_cells, "budget"))
                break
            one_repeat(max(open_cells, key=width))  # the least precise cell gets the next repeat
        return {f"{s}|{bk}": {"repeats": repeats[(s, bk)], "stopped_by": stop[(s, bk)]} for (s, bk) in cells}

    def outputs_phase(self, settings: GenerationSettings) -> None:
        """Greedy outputs of every engine on the whole suite at every batch size (the equivalence data).

        The reference's are served from the cache when nothing it depends on changed.  Untimed
        runs add a second run at the repeat batch size for the run-to-run check; timed runs get
        it from the timing phase.
        """
        repeat_bs = self.cfg.checks.reproducibility.repeat_batch_size or max(self.cfg.batching.batch_sizes)
        second = self.repeat_runs and not self.timed
        for b in self.cfg.batching.batch_sizes:
            engines = self._engines_at(b, "greedy")
            self.say(f"outputs at batch size {b}: reference, {', '.join(e.name for e in engines) or '(none)'}")
            for pb in plan_batches(self.prompts, b):
                for r in range(2 if (second and b == repeat_bs) else 1):
                    self.execute(self.reference, "outputs", pb, r, settings,
                                 cache_key=self._reference_key("outputs", pb, r, settings) if r == 0 else None)
                    for e in engines:
                        self.execute(e, "outputs", pb, r, settings)

    def canonical_phase(self, settings: GenerationSettings) -> None:
        if 1 in self.cfg.batching.batch_sizes:
            return
        self.say("canonical reference at batch size 1")
        for pb in plan_batches(self.prompts, 1):
            self.execute(self.reference, "canonical", pb, 0, settings,
                         cache_key=self._reference_key("canonical", pb, 0, settings))

    def sampling_phase(self, settings: GenerationSettings) -> None:
        need = self.cfg.checks.distribution.num_samples
        sizes = self.cfg.generation.sampling.batch_sizes or self.cfg.batching.batch_sizes
        for b in sizes:
            # The plain sampler is the control; with per-request seeds its output does not depend
            # on batch composition, so one batch size is enough for it.
            engines = ([self.reference] if b == sizes[0] else []) + self._engines_at(b, "sampling")
            batches = plan_batches(self.prompts, b)
            self.say(f"sampling at batch size {b}, T={settings.temperature}: {need} tokens per engine")
            for e in engines:
                got, p = 0, 0
                while got < need:
                    for pb in batches:
                        key = (self._reference_key("sampling", pb, p, settings) if e is self.reference else None)
                        rec = self.execute(e, "sampling", pb, p, settings, cache_key=key)
                        got += sum(len(s["token_ids"]) for s in rec["sequences"] if not s["filler"])
                    p += 1

    # --- the whole run --------------------------------------------------------------------

    def run(self, resume: bool = False) -> dict:
        header = self.header()
        records_path = self.out_dir / RECORDS
        if resume:
            old_header, old = read_records(records_path)
            if old_header and old_header.get("fingerprint", {}).get("config") == header["fingerprint"]["config"] \
                    and old_header.get("fingerprint", {}).get("models") == header["fingerprint"]["models"]:
                self.previous = {self._key(r): r for r in old if r.get("kind") == "execution"}
                self.say(f"resuming: {len(self.previous)} finished executions found in {records_path}")
            elif old_header:
                self.say(f"not resuming: {records_path} is from a different config or models; starting over")
        self.log = RecordLog(records_path)
        self.log.start(header)
        for rec in list(self.previous.values()):
            self.log.append(rec)  # keep them on disk even if this run stops before reusing them

        status, stopped, extra = "complete", None, {}
        old_handler = signal.getsignal(signal.SIGTERM)

        def on_term(signum, frame):
            raise Interrupted("SIGTERM")

        try:
            signal.signal(signal.SIGTERM, on_term)
        except ValueError:  # not the main thread
            old_handler = None
        try:
            if self.timed:
                extra["calibration"] = self.calibrate()
            if self.cfg.generation.greedy:
                self.outputs_phase(self.greedy)
                if self.timed:
                    extra["timing"] = self.timing_phase(self.greedy)
                self.canonical_phase(self.greedy)
            if self.sampled:
                self.sampling_phase(self.sampled)
        except (KeyboardInterrupt, Interrupted) as exc:
            status = "interrupted"
            stopped = {**(self.current or {}), "reason": str(exc) or "interrupted (SIGINT)"}
        except BaseException as exc:
            status = "failed"
            stopped = {**(self.current or {}), "reason": f"{type(exc).__name__}: {exc}"}
            raise
        finally:
            if old_handler is not None:
                signal.signal(signal.SIGTERM, old_handler)
            self.log.close()
            doc = {**header, "status": status, "stopped_at": stopped, **extra,
                   "executions": self.records, "skipped": self.skipped, "cache": {"reused": self.reused}}
            atomic_write_json(self.out_dir / RESULTS, doc)
        return doc
