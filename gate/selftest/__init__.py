"""``specguard selftest``: prove that the checks catch known bugs and leave a correct engine alone.

On the embedded demo pair, with a small slice-balanced subset of the default
suite, the gate's checks are run against:

* every mutant in :mod:`gate.engines.mutants` — each must be caught by at least
  one named check (equivalence, a corruption signature, or distribution).  A
  mutant is run in stages, cheapest catch first (greedy at batch size 4,
  sampling, greedy at batch size 1; sampling first for a mutant whose bug only
  sampling reaches), and stops at the first stage whose checks catch
  it: the claim is "caught", and one failing check proves it.  ``every_check``
  (``--every-check``, and ``--repro``, whose cases need every failing check)
  runs every stage and lists every check that catches it;
* the correct speculative engine, over ``seeds`` runs — it must raise no alarm
  at all.  The first run is the control: the mutants' own configuration, seed
  and batches, so it reuses their reference outputs.  Each later run changes the
  sampling seed and the order of prompts (hence batch composition).

EOS is set to a frequent token for the self-test, so that sequences end
mid-block and EOS handling is exercised.
"""

from __future__ import annotations

import dataclasses
import random
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from gate.checks.analysis import run_checks
from gate.checks.doc import ChecksDoc
from gate.engines.mutants import LOOKUP_MUTANTS, MUTANTS
from gate.engines.reference import ReferenceEngine
from gate.engines.speculative import SpeculativeEngine
from gate.engines.tolerance import noise_reused
from gate.errors import Problem, SpecguardError
from gate.inputs.config import PACKAGE_DIR, parse_config
from gate.inputs.models import load_pair
from gate.inputs.suite import Suite, load_suite
from gate.run.cache import ReferenceCache
from gate.run.runner import Runner

SELFTEST_CONFIG = """\
version: 1
models:
  target: {path: "specguard:demo/target", dtype: %(dtype)s}
  draft: {path: "specguard:demo/draft", dtype: %(dtype)s}
  device: %(device)s
speculation: {num_draft_tokens: 4}
batching: {batch_sizes: %(batch_sizes)s, compositions: 1}  # a second composition at 4 changed no mutant's catch
generation:
  max_new_tokens: 32
  greedy: %(greedy)s
%(sampling)schecks:
  distribution: {num_samples: %(samples)d, alpha: 0.01, power_trials: 0}
output: {cache_dir: null}
"""
# A method without a draft model (speculation.method: ngram): transformers' prompt lookup decoding, at batch size 1
# (its only one), with the n-gram lookup the distribution check recomputes (prompt_lookup_min 1, max 2: transformers')
LOOKUP_CONFIG = """\
version: 1
models:
  target: {path: "specguard:demo/target", dtype: %(dtype)s}
  device: %(device)s
speculation: {num_draft_tokens: 4, method: ngram, prompt_lookup_min: 1, prompt_lookup_max: 2}
batching: {batch_sizes: [1], compositions: 1}
generation:
  max_new_tokens: 32
  greedy: %(greedy)s
%(sampling)schecks:
  distribution: {num_samples: %(samples)d, alpha: 0.01, power_trials: 0}
engines: [{type: hf_assisted}]
output: {cache_dir: null}
"""
# A stage: (batch sizes, greedy, sampled batch sizes).  A mutant's stages, cheapest catch first: greedy at batch
# size 4 (6 batches; its equivalence check compares against the canonical batch-size-1 reference), then the sampled
# tokens (the sampling mutants change nothing greedy), then greedy at batch size 1 (22 batches).
FULL, LOOKUP_FULL = ((1, 4), True, (4,)), ((1,), True, (1,))
STAGES = (((4,), True, ()), ((4,), False, (4,)), ((1,), True, ()))
# A mutant whose seam only sampling reaches (``sampling_only``: its greedy output is the correct engine's by
# construction) starts at the sampled stage: the greedy one at batch size 4 cannot catch it (3 s a mutant on CPU).
SAMPLING_FIRST = (STAGES[1], STAGES[0], STAGES[2])
LOOKUP_STAGES = (((1,), True, ()), ((1,), False, (1,)))
EOS_TEXT = ","  # a frequent token: sequences stop mid-block often enough to test EOS handling
PROMPTS_PER_SLICE = 2
LONG_PROMPTS = 1


def stage_config(template: str, stage, seed: int, samples: int, dtype: str, device: str):
    """The self-test's config for one stage (see STAGES)."""
    batch_sizes, greedy, sampled = stage
    sampling = f"  sampling: {{temperature: 1.0, seed: {seed}, batch_sizes: {list(sampled)}}}\n" if sampled else ""
    return parse_config(template % {"seed": seed, "samples": samples, "dtype": dtype, "device": device,
                                    "batch_sizes": list(batch_sizes), "greedy": str(greedy).lower(),
                                    "sampling": sampling}, PACKAGE_DIR / "selftest.yaml")


def checked(runner: Runner, pair, config):
    """A self-test run's results and checks as ``specguard gate`` makes them: a distribution test that lands between
    its floor and alpha is sampled again on the same engines first (:mod:`gate.checks.confirmation`)."""
    results = runner.run()
    checks = run_checks(results, pair, config)
    if checks.unconfirmed():
        results = runner.confirm(checks.unconfirmed(), results)
        checks = run_checks(results, pair, config)
    return results, checks

def selftest_suite(order_seed: int | None = None) -> Suite:
    full = load_suite(PACKAGE_DIR / "suites" / "default.jsonl")
    picked, seen = [], {}
    for p in full.prompts:
        seen[p.slice] = seen.get(p.slice, 0) + 1
        # One long prompt (prefill-heavy on CPU) is enough to mix lengths in a batch.
        if seen[p.slice] <= (LONG_PROMPTS if p.slice == "long-context" else PROMPTS_PER_SLICE):
            picked.append(p)
    if order_seed is not None:
        random.Random(order_seed).shuffle(picked)
    return Suite("selftest", tuple(picked))


@dataclass(frozen=True)
class MutantResult:
    name: str
    caught: bool
    caught_by: list[str]  # the failing checks that caught it
    doc: str = ""  # the bug, in a sentence


@dataclass(frozen=True)
class CorrectRun:
    seed: int
    alarms: list[str]  # failing checks on the correct engine: false alarms


@dataclass
class SelftestReport:
    mutants: list[MutantResult] = field(default_factory=list)
    correct: list[CorrectRun] = field(default_factory=list)

    @property
    def false_alarms(self) -> int:
        return sum(len(r.alarms) for r in self.correct)

    @property
    def passed(self) -> bool:
        return all(m.caught for m in self.mutants) and self.false_alarms == 0

    def to_json(self) -> dict:
        """What ``specguard selftest --json`` prints."""
        return {"mutants": [{"name": m.name, "caught": m.caught, "caught_by": m.caught_by} for m in self.mutants],
                "correct_engine": {"passed": self.false_alarms == 0, "false_alarms": self.false_alarms,
                                   "runs": len(self.correct)}}

    def lines(self) -> list[str]:
        """What ``specguard selftest`` prints: a line per mutant, then the correct engine's."""
        return [f"{'caught ' if m.caught else 'ESCAPED'} {m.name:<26} {', '.join(m.caught_by)}" for m in self.mutants] \
            + [f"correct engine: {self.false_alarms} false alarm(s) in {len(self.correct)} run(s)"]


def _shrink(run_dir: Path, results, checks: ChecksDoc, loaded, pair, engine, into: Path, budget_s: float,
            say, kind=None) -> None:
    """A caught mutant's minimal cases, as `specguard repro` writes them for a failing run (its replay.py rebuilds
    the mutant by name; ``kind``: its engine type, the gate's own speculative engine by default)."""
    from gate.engines.types.speculative import SPECULATIVE
    from gate.io.rundir import RunDir
    from gate.repro import reproduce
    from gate.run.setup import Models

    kind = kind or SPECULATIVE
    reproduce(RunDir(run_dir), loaded, Models(pair, [engine]), budget_s, say, root=into, checked=(results, checks),
              describe=lambda label, spec, e: kind.case_engine(None, e, loaded, pair, label, variant=engine.name))


def _alarms(checks: ChecksDoc, engine: str) -> list[str]:
    return sorted({v.check for v in checks.failing() if v.engine == engine})


def _prompt_lookup(pair, reference, cache, samples: int, dtype: str, device: str, tmp: Path, mutants: list[str],
                   say, log_for, correct: list, every_check: bool, repro: Path | None = None,
                   repro_budget_s: float = 120.0) -> list[MutantResult]:
    """The draft-free method: transformers' prompt lookup decoding, correct (no alarm allowed, recorded as the
    correct engine's run ``lookup``; every stage) and each of its mutants (each must be caught: staged as the
    speculative mutants are, and with ``repro`` shrunk to its minimal cases in ``repro/<mutant>/``), at batch
    size 1."""
    from gate.engines.hf_assisted import PromptLookupEngine
    from gate.engines.proposers import proposer_for
    from gate.engines.types.hf_assisted import HF_ASSISTED

    if not mutants:
        return []
    lookup_pair = dataclasses.replace(pair, draft=None)
    pad = pair.tokenizer.pad_token_id or 0
    out = []
    for name in ["prompt-lookup", *mutants]:
        cls = PromptLookupEngine if name == "prompt-lookup" else LOOKUP_MUTANTS[name]
        stages = (LOOKUP_FULL,) if every_check or name == "prompt-lookup" else LOOKUP_STAGES
        for i, stage in enumerate(stages):
            cfg = stage_config(LOOKUP_CONFIG, stage, 0, samples, dtype, device)
            engine = cls(pair.target.model, pair.device, pad, lookup=proposer_for(cfg.config))
            engine.name = name
            runner = Runner(cfg, lookup_pair, selftest_suite(), reference, [engine], tmp / name / str(i),
                            log=log_for(name), cache=cache, timed=False, repeat_runs=False)
            results, checks = checked(runner, lookup_pair, cfg.config)
            alarms = _alarms(checks, name)
            if alarms:
                break
        if repro is not None and alarms and name != "prompt-lookup":
            try:
                _shrink(tmp / name / str(i), results, checks, cfg, lookup_pair, engine, Path(repro) / name,
                        repro_budget_s, log_for(name), kind=HF_ASSISTED)
            except Exception as exc:  # the cases are an aid: the self-test's own verdict stands
                say(f"mutant {name}: minimal cases not written: {type(exc).__name__}: {exc}"[:500])
        if name == "prompt-lookup":
            correct.append(CorrectRun(-1, alarms + _alarms(checks, "reference")))
            say(f"correct prompt lookup engine: {', '.join(alarms) if alarms else 'no alarm'}")
            continue
        out.append(MutantResult(name, bool(alarms), alarms, (cls.__doc__ or "").strip()))
        say(f"mutant {name}: {'caught by ' + ', '.join(alarms) if alarms else 'ESCAPED'}")
    return out


def selftest(seeds: int = 20, samples: int = 600, mutants: list[str] | None = None,
             say: Callable[[str], None] = lambda m: None, detail: Callable[[str], None] | None = None,
             dtype: str = "float32", repro: Path | None = None, repro_budget_s: float = 120.0,
             device: str = "cpu", every_check: bool = False) -> SelftestReport:
    """Run the self-test.  ``say`` gets one line per mutant and per seed; ``detail`` (``-v``), when given, also
    each run's phase lines, prefixed with the run's name.  ``dtype``: the pair's (bfloat16 flips near-ties, as
    GPUs do: the correct engine must still raise no alarm, and the mutants must still be caught).  ``device``:
    models.device (cpu by default; cuda runs the same self-test on a GPU's own kernels).  ``repro``: each
    caught mutant's failing checks shrunk to minimal cases (gate.repro) in ``repro/<mutant>/``, within
    ``repro_budget_s`` per mutant (every stage is run).  ``every_check``: each mutant through every stage at once,
    its report listing every check that catches it, not only the first stage's."""
    unknown = sorted(set(mutants or ()) - set(MUTANTS) - set(LOOKUP_MUTANTS))
    if unknown:
        raise SpecguardError(Problem("specguard selftest", f"no mutant named {', '.join(map(repr, unknown))}",
                                     field="--mutant", hint=f"choose from {', '.join([*MUTANTS, *LOOKUP_MUTANTS])}"))

    def log_for(name: str) -> Callable[[str], None]:
        return (lambda m: detail(f"  {name}: {m}")) if detail else (lambda m: None)

    torch.manual_seed(0)
    every_check = every_check or repro is not None
    base = stage_config(SELFTEST_CONFIG, FULL, 0, samples, dtype, device)
    loaded = load_pair(base)
    eos = loaded.encode(EOS_TEXT)
    if len(eos) != 1:
        raise RuntimeError(f"self-test EOS {EOS_TEXT!r} is not one token in the demo tokenizer")
    pair = dataclasses.replace(loaded, eos_override=tuple(eos))  # a view with another EOS; the models are shared
    reference = ReferenceEngine(pair.target.model, pair.device)
    out = SelftestReport()
    with tempfile.TemporaryDirectory(prefix="specguard-selftest-") as tmp, noise_reused():
        cache = ReferenceCache(Path(tmp) / "cache")
        suite = selftest_suite()
        for name in [m for m in mutants or list(MUTANTS) if m in MUTANTS]:
            engine = MUTANTS[name](pair.target.model, pair.draft.model, pair.device)
            engine.name = name
            stages = SAMPLING_FIRST if getattr(MUTANTS[name], "sampling_only", False) else STAGES
            for i, stage in enumerate((FULL,) if every_check else stages):  # stop at the first stage that catches it
                cfg = base if every_check else stage_config(SELFTEST_CONFIG, stage, 0, samples, dtype, device)
                runner = Runner(cfg, pair, suite, reference, [engine], Path(tmp) / name / str(i), log=log_for(name),
                                cache=cache, timed=False, repeat_runs=False)
                results, checks = checked(runner, pair, cfg.config)
                caught_by = _alarms(checks, name)
                if caught_by:
                    break
            if repro is not None and caught_by:
                try:
                    _shrink(Path(tmp) / name / "0", results, checks, base, pair, engine, Path(repro) / name,
                            repro_budget_s, log_for(name))
                except Exception as exc:  # the cases are an aid: the self-test's own verdict stands
                    say(f"mutant {name}: minimal cases not written: {type(exc).__name__}: {exc}"[:500])
            out.mutants.append(MutantResult(name, bool(caught_by), caught_by, (MUTANTS[name].__doc__ or "").strip()))
            say(f"mutant {name}: {'caught by ' + ', '.join(caught_by) if caught_by else 'ESCAPED'}")
        out.mutants += _prompt_lookup(pair, reference, cache, samples, dtype, device, Path(tmp),
                                      [m for m in mutants or list(LOOKUP_MUTANTS) if m in LOOKUP_MUTANTS], say, log_for,
                                      out.correct, every_check, repro, repro_budget_s)
        for seed in range(seeds):
            cfg = stage_config(SELFTEST_CONFIG, FULL, seed, samples, dtype, device)
            engine = SpeculativeEngine(pair.target.model, pair.draft.model, pair.device)
            # run 0: the mutants' order and seed (the control on the batches they were caught in); then shuffled
            runner = Runner(cfg, pair, selftest_suite(order_seed=seed or None), reference, [engine],
                            Path(tmp) / f"correct-{seed}", log=log_for(f"correct-{seed}"), cache=cache, timed=False,
                            repeat_runs=False)
            _, checks = checked(runner, pair, cfg.config)
            alarms = _alarms(checks, "speculative") + _alarms(checks, "reference")
            out.correct.append(CorrectRun(seed, alarms))
            say(f"correct engine, seed {seed}: {', '.join(alarms) if alarms else 'no alarm'}")
    return out

