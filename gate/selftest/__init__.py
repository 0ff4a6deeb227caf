"""``specguard selftest``: prove that the checks catch known bugs and leave a correct engine alone.

On the embedded demo pair, with a small slice-balanced subset of the default
suite, the gate's checks are run against:

* every mutant in :mod:`gate.engines.mutants` — each must be caught by at least
  one named check (equivalence, a corruption signature, or distribution);
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
batching: {batch_sizes: [1, 4], compositions: 1}  # a second composition at 4 changed no mutant's catch
generation:
  max_new_tokens: 32
  greedy: true
  sampling: {temperature: 1.0, seed: %(seed)d, batch_sizes: [4]}
checks:
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
  greedy: true
  sampling: {temperature: 1.0, seed: %(seed)d, batch_sizes: [1]}
checks:
  distribution: {num_samples: %(samples)d, alpha: 0.01, power_trials: 0}
engines: [{type: hf_assisted}]
output: {cache_dir: null}
"""
EOS_TEXT = ","  # a frequent token: sequences stop mid-block often enough to test EOS handling
PROMPTS_PER_SLICE = 2
LONG_PROMPTS = 1



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
                   say, log_for, correct: list, repro: Path | None = None,
                   repro_budget_s: float = 120.0) -> list[MutantResult]:
    """The draft-free method: transformers' prompt lookup decoding, correct (no alarm allowed, recorded as the
    correct engine's run ``lookup``) and each of its mutants (each must be caught, and with ``repro`` shrunk to its
    minimal cases in ``repro/<mutant>/``), at batch size 1."""
    from gate.engines.hf_assisted import PromptLookupEngine
    from gate.engines.proposers import proposer_for
    from gate.engines.types.hf_assisted import HF_ASSISTED

    if not mutants:
        return []
    cfg = parse_config(LOOKUP_CONFIG % {"seed": 0, "samples": samples, "dtype": dtype, "device": device},
                       PACKAGE_DIR / "selftest.yaml")
    lookup_pair = dataclasses.replace(pair, draft=None)
    pad = pair.tokenizer.pad_token_id or 0
    out = []
    for name in ["prompt-lookup", *mutants]:
        cls = PromptLookupEngine if name == "prompt-lookup" else LOOKUP_MUTANTS[name]
        engine = cls(pair.target.model, pair.device, pad, lookup=proposer_for(cfg.config))
        engine.name = name
        runner = Runner(cfg, lookup_pair, selftest_suite(), reference, [engine], tmp / name, log=log_for(name),
                        cache=cache, timed=False, repeat_runs=False)
        results, checks = checked(runner, lookup_pair, cfg.config)
        alarms = _alarms(checks, name)
        if repro is not None and alarms and name != "prompt-lookup":
            try:
                _shrink(tmp / name, results, checks, cfg, lookup_pair, engine, Path(repro) / name, repro_budget_s,
                        log_for(name), kind=HF_ASSISTED)
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
             device: str = "cpu") -> SelftestReport:
    """Run the self-test.  ``say`` gets one line per mutant and per seed; ``detail`` (``-v``), when given, also
    each run's phase lines, prefixed with the run's name.  ``dtype``: the pair's (bfloat16 flips near-ties, as
    GPUs do: the correct engine must still raise no alarm, and the mutants must still be caught).  ``device``:
    models.device (cpu by default; cuda runs the same self-test on a GPU's own kernels).  ``repro``: each
    caught mutant's failing checks shrunk to minimal cases (gate.repro) in ``repro/<mutant>/``, within
    ``repro_budget_s`` per mutant."""
    unknown = sorted(set(mutants or ()) - set(MUTANTS) - set(LOOKUP_MUTANTS))
    if unknown:
        raise SpecguardError(Problem("specguard selftest", f"no mutant named {', '.join(map(repr, unknown))}",
                                     field="--mutant", hint=f"choose from {', '.join([*MUTANTS, *LOOKUP_MUTANTS])}"))

    def log_for(name: str) -> Callable[[str], None]:
        return (lambda m: detail(f"  {name}: {m}")) if detail else (lambda m: None)

    torch.manual_seed(0)
    base = parse_config(SELFTEST_CONFIG % {"seed": 0, "samples": samples, "dtype": dtype, "device": device},
                        PACKAGE_DIR / "selftest.yaml")
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
            runner = Runner(base, pair, suite, reference, [engine], Path(tmp) / name, log=log_for(name),
                            cache=cache, timed=False, repeat_runs=False)
            results, checks = checked(runner, pair, base.config)
            caught_by = _alarms(checks, name)
            if repro is not None and caught_by:
                try:
                    _shrink(Path(tmp) / name, results, checks, base, pair, engine, Path(repro) / name,
                            repro_budget_s, log_for(name))
                except Exception as exc:  # the cases are an aid: the self-test's own verdict stands
                    say(f"mutant {name}: minimal cases not written: {type(exc).__name__}: {exc}"[:500])
            out.mutants.append(MutantResult(name, bool(caught_by), caught_by, (MUTANTS[name].__doc__ or "").strip()))
            say(f"mutant {name}: {'caught by ' + ', '.join(caught_by) if caught_by else 'ESCAPED'}")
        out.mutants += _prompt_lookup(pair, reference, cache, samples, dtype, device, Path(tmp),
                                      [m for m in mutants or list(LOOKUP_MUTANTS) if m in LOOKUP_MUTANTS], say, log_for,
                                      out.correct, repro, repro_budget_s)
        for seed in range(seeds):
            cfg = parse_config(SELFTEST_CONFIG % {"seed": seed, "samples": samples, "dtype": dtype, "device": device},
                               PACKAGE_DIR / "selftest.yaml")
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

