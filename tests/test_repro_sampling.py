"""Issue 53, item 1: a failing sampling check hands over a minimal case on any method and any truncation, and the
case's replay recounts the statistic that failed with the target alone (and the lookup, for n-gram), on planted
data: a bigram "target" (its logits depend on the last token only) scored by a scorer of the gate's interface, and
planted samplers, correct and broken.  No weights; the real engines' cases are tests/test_repro.py (slow)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import gate.engines  # noqa: F401  (registers the engine types a config names)
from gate.checks.distribution import analyze, observed_pvalues
from gate.engines.base import GenerationSettings
from gate.engines.proposers import Head, NgramLookup
from gate.engines.sampling import probs
from gate.inputs.config import REFERENCE, Config
from gate.repro.replay import Recount, distribution, lookup
from gate.repro.sampling import write_sampling_case
from gate.repro.target_side import fewest_batches
from gate.run.records import Phase
from gate.stacks import orders

V = 12


class Bigram:
    """A planted target: the logits after a token are a fixed random row of a table."""

    def __init__(self, seed: int = 0, scale: float = 2.0):
        self.table = np.random.default_rng(seed).normal(size=(V, V)) * scale

    def logits(self, prompt, out) -> torch.Tensor:
        ctx = list(prompt) + list(out)
        return torch.tensor(np.stack([self.table[ctx[len(prompt) - 1 + t]] for t in range(len(out))]),
                            dtype=torch.float32)


class Scorer:
    """The gate's Scorer interface on the planted target."""

    def __init__(self, model: Bigram):
        self.model, self.seconds = model, 0.0

    def logits_rows(self, items, fn, batch_size=None):
        return [fn(i, self.model.logits(p, o)) if o else None for i, (p, o) in enumerate(items)]


def sample(model: Bigram, prompt, n: int, seed: int, gen: GenerationSettings, lean=None, untruncated=False):
    """n tokens from the planted target at ``gen``; ``lean(context, p) -> token or None``: a broken sampler's pick
    half the time; ``untruncated``: a sampler that drops the truncation."""
    rng = np.random.default_rng(seed)
    out: list[int] = []
    for _ in range(n):
        logits = model.logits(prompt, [*out, 0])[-1:]
        p = probs(logits, GenerationSettings(gen.temperature) if untruncated else gen)[0].double().numpy()
        forced = lean(list(prompt) + out, p) if lean else None
        out.append(int(forced) if forced is not None and rng.random() < 0.5 else int(rng.choice(V, p=p / p.sum())))
    return out


def to_target(_, p):
    return int(p.argmax())


def to_lookup(context, _):
    return lookup(context, 1, 2)


@dataclass
class Seq:
    prompt_id: str
    token_ids: tuple
    seed: int
    filler: bool = False
    served_top: list | None = None  # a served target's top-k per position (id: logprob)


@dataclass
class Ex:
    engine: str
    batch_size: int
    sequences: list
    phase: Phase = Phase.SAMPLING
    failure: None = None


@dataclass
class Results:
    prompts: dict
    executions: list = field(default_factory=list)
    settings: SimpleNamespace = field(default_factory=lambda: SimpleNamespace(num_draft_tokens=4, eos_token_ids=()))
    fingerprint: SimpleNamespace = field(default_factory=lambda: SimpleNamespace(
        hardware_key="cpu-test", libraries={"torch": "2.x"}, stacks={}))

    def prompt(self, pid):
        return self.prompts[pid]

    def sampled(self, name, bs):
        return [s for ex in self.executions if ex.engine == name and ex.batch_size == bs for s in ex.sequences]


class Engine:
    """A planted engine of the gate's contract: each row from its prompt and seed alone."""

    def __init__(self, model, lean=None, untruncated=False):
        self.model, self.lean, self.untruncated, self.runs = model, lean, untruncated, 0

    def generate(self, requests, settings):
        self.runs += 1
        return SimpleNamespace(sequences=[SimpleNamespace(token_ids=tuple(sample(
            self.model, r.prompt_ids, r.max_new_tokens, r.seed, settings, self.lean, self.untruncated)))
            for r in requests])


def config(method: str = "ngram", local_weights=True, **sampling) -> Config:
    spec = {"ngram": {"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 2},
            "eagle": {"method": "eagle", "head": "org/head"}, "draft_model": {"method": "draft_model"}}[method]
    draft = {"draft": {"path": "org/draft"}} if method == "draft_model" else {}
    return Config.model_validate({
        "models": {"target": {"path": "org/target"}, "local_weights": local_weights, **draft},
        "speculation": spec, "engines": [{"type": "plugin", "callable": "broken:generate"}],
        "generation": {"max_new_tokens": 16, "sampling": {"temperature": 1.0, **sampling}},
        "checks": {"distribution": {"alpha": 0.01, "null_trials": 1000}}})


def run_of(cfg: Config, model: Bigram, engine: Engine, batches: int = 8, bs: int = 4, tokens: int = 16):
    """A run's sampled batches of the engine ("broken") and of the plain reference (a correct sampler)."""
    gen = GenerationSettings(1.0, 4, (), **cfg.generation.sampling.truncation())
    rng = np.random.default_rng(7)
    prompts = {f"p{i}": SimpleNamespace(prompt_ids=tuple(int(t) for t in rng.integers(0, V, 2 + i % 5)),
                                        max_new_tokens=tokens) for i in range(batches * bs)}
    results = Results(prompts)
    for name, eng in (("broken", engine), (REFERENCE, Engine(model))):
        for b in range(batches):
            ids = [f"p{b * bs + r}" for r in range(bs)]
            outs = eng.generate([SimpleNamespace(prompt_ids=prompts[i].prompt_ids, max_new_tokens=tokens, seed=100 + j)
                                 for j, i in zip(range(b * bs, b * bs + bs), ids)], gen).sequences
            results.executions.append(Ex(name, bs, [Seq(i, o.token_ids, 100 + b * bs + r)
                                                    for r, (i, o) in enumerate(zip(ids, outs))]))
    engine.runs = 0
    return results


def ctx_of(cfg: Config, model: Bigram, local: bool = True, draft: Bigram | None = None):
    scorer = Scorer(model)
    return SimpleNamespace(config=cfg, local=local, scorer=scorer if local else None,
                           scorer_for=lambda m: Scorer(m) if isinstance(m, Bigram) else scorer,
                           pair=SimpleNamespace(target=SimpleNamespace(location="org/target", vocab_size=V,
                                                                       model=object() if local else None),
                                                draft=SimpleNamespace(location="org/draft", model=draft)
                                                if draft else None, device="cpu"))


DESCRIBED = {"type": "plugin", "label": "broken", "replay": "callable", "callable": "broken:generate",
             "pythonpath": [], "settings": {}}


def write(tmp_path, cfg, model, engine, local=True, row=None, draft=None, **run):
    results = run_of(cfg, model, engine, **run)
    said: list[str] = []
    w = write_sampling_case(tmp_path / "distribution-1", "repro/distribution-1", ctx_of(cfg, model, local, draft),
                            results,
                            "broken", run.get("bs", 4), DESCRIBED, said.append, run_engine=engine, row=row,
                            budget_s=60.0)
    return w, json.loads((tmp_path / "distribution-1" / "case.json").read_text()), \
        (tmp_path / "distribution-1" / "REPORT.md").read_text(), results


def recounted(case: dict, model: Bigram, outs=None) -> tuple[bool, list[str]]:
    """What the case's replay.py decides on the case's tokens (``outs``: another engine's, per batch)."""
    r = Recount(case["settings"], case["tests"], case.get("ngram"))
    for b, batch in enumerate(case["batches"]):
        for prompt, out in zip(batch["prompts"], outs[b] if outs else batch["emitted"]):
            if out:
                r.add(prompt, out, model.logits(prompt, out).numpy())
    return r.verdict(case["settings"]["alpha"], case["decide"])


# --- the replay's own recount, against the gate's -------------------------------------------------------


@pytest.mark.parametrize("order", list(orders()))
@pytest.mark.parametrize("trunc", [(5, 1.0, 0.0), (0, 0.9, 0.0), (0, 1.0, 0.1), (6, 0.8, 0.05), (3, 0.5, 0.3)])
def test_the_replay_truncates_as_the_stacks_do(order, trunc):
    k, top_p, min_p = trunc
    logits = np.random.default_rng(1).normal(size=(200, 50)) * 3
    mine = distribution(logits, {"temperature": 0.7, "truncation": {"top_k": k, "top_p": top_p, "min_p": min_p,
                                                                     "steps": list(orders()[order])}})
    gates = probs(torch.tensor(logits), GenerationSettings(0.7, top_k=k, top_p=top_p, min_p=min_p, order=order))
    assert ((mine == 0) == (gates.numpy() == 0)).all()
    assert np.abs(mine - gates.double().numpy()).max() < 1e-5


@pytest.mark.parametrize("lengths", [(1, 2), (2, 3), (5, 5)])
def test_the_replay_lookup_is_the_gates(lengths):
    rng = np.random.default_rng(2)
    gates = NgramLookup(*lengths)
    for _ in range(300):
        ctx = [int(t) for t in rng.integers(0, 4, rng.integers(1, 30))]
        proposed = gates.propose(ctx, 1)
        assert lookup(ctx, *lengths) == (proposed[0] if proposed else None), ctx


@pytest.mark.parametrize("how", [Head("planted"), NgramLookup(1, 2)], ids=["target", "ngram"])
def test_the_recount_is_the_checks_statistic(how):
    """The replay's z-tests are the check's asymptotic ones on the same tokens (the PIT's uniforms differ)."""
    model, gen = Bigram(), GenerationSettings(1.0)
    items = [((3, i % V), tuple(sample(model, (3, i % V), 20, i, gen, to_lookup))) for i in range(30)]
    a = analyze(Scorer(model), how, items, gen, V, null_trials=0)
    gates = observed_pvalues(a, np.random.default_rng(0), how.tests)
    r = Recount({"temperature": 1.0}, list(how.tests), [1, 2] if isinstance(how, NgramLookup) else None)
    for prompt, out in items:
        r.add(prompt, out, model.logits(prompt, out).numpy())
    mine = r.result()["pvalues"]
    for test in how.tests:
        if test != "pit_ks":
            assert mine[test] == pytest.approx(gates[test], rel=1e-4, abs=1e-12), test


@pytest.mark.parametrize(("tests", "lean"), [(["pit_ks", "target_top", "target_logprob"], to_target),
                                             (["pit_ks", "ngram_top"], to_lookup)], ids=["target", "ngram"])
def test_the_recount_rejects_a_leaning_sampler_and_passes_a_correct_one(tests, lean):
    model, gen = Bigram(), GenerationSettings(1.0)
    for leaning, expected in ((lean, True), (None, False)):
        r = Recount({"temperature": 1.0}, tests, [1, 2])
        for i in range(40):
            prompt = (1, i % V)
            r.add(prompt, out := sample(model, prompt, 16, 500 + i, gen, leaning), model.logits(prompt, out).numpy())
        reproduced, lines = r.verdict(0.01)
        assert reproduced is expected, lines
        assert any(line.startswith(tests[1]) for line in lines), lines


def test_one_token_outside_the_truncation_reproduces_by_itself():
    model = Bigram()
    s = {"temperature": 1.0, "alpha": 0.01, "truncation": {"top_k": 0, "top_p": 0.5, "min_p": 0.0,
                                                            "steps": ["min_p", "top_k", "top_p"]}}
    gen = GenerationSettings(1.0, top_p=0.5)
    prompt = (4,)
    inside = sample(model, prompt, 12, 0, gen)
    p = distribution(model.logits(prompt, [*inside[:5], 0]).numpy()[-1:], s)[0]
    bad = [*inside[:5], int(np.nonzero(p == 0)[0][0])]
    for out, expected in ((inside, False), (bad, True)):
        r = Recount(s, [])
        r.add(prompt, out, model.logits(prompt, out).numpy())
        assert r.verdict(0.01, "outside")[0] is expected
        assert r.rows[-1]["outside"] == ([5] if expected else [])


def test_the_fewest_batches_are_those_from_which_on_every_longer_prefix_rejects():
    model, gen = Bigram(), GenerationSettings(1.0)
    r = Recount({"temperature": 1.0}, ["pit_ks", "target_top", "target_logprob"])
    for i in range(48):
        r.add((2,), out := sample(model, (2,), 16, i, gen, to_target), model.logits((2,), out).numpy())
    j = fewest_batches(r, [4] * 12, 0.01)
    assert j is not None and j < 12
    assert all(r.verdict(0.01, rows=4 * n)[0] for n in range(j, 13))
    assert j == 1 or not r.verdict(0.01, rows=4 * (j - 1))[0]
    clean = Recount({"temperature": 1.0}, ["pit_ks", "target_top", "target_logprob"])
    for i in range(16):
        clean.add((2,), out := sample(model, (2,), 16, i, gen), model.logits((2,), out).numpy())
    assert fewest_batches(clean, [4] * 4, 0.01) is None


# --- the case's contents --------------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "lean", "tests"), [("ngram", to_lookup, ["pit_ks", "ngram_top"]),
                                                       ("eagle", to_target, ["pit_ks", "target_top",
                                                                             "target_logprob"])])
def test_a_method_without_a_draft_model_gets_a_case_its_replay_recounts_with_the_target_alone(tmp_path, method,
                                                                                             lean, tests):
    model = Bigram()
    cfg = config(method)
    w, case, report, _ = write(tmp_path, cfg, model, Engine(model, lean))
    assert w.reproduced and "no minimal case" not in w.trigger, w.trigger
    assert case["tests"] == tests and case["decide"] == "tests" and case["models"]["draft"] is None
    assert case.get("ngram") == ([1, 2] if method == "ngram" else None)
    assert 1 <= len(case["batches"]) <= case["shrunk_from"]["batches"] == 8
    assert all(len(b["emitted"]) == len(b["prompts"]) == len(b["seeds"]) for b in case["batches"])
    assert f"method {method}" in w.trigger and case["trigger"] in report and tests[1] in report
    assert (tmp_path / "distribution-1" / "replay.py").exists()
    assert recounted(case, model)[0], "the replay's recount reproduces on the case's recorded tokens"


def test_a_token_outside_the_truncation_is_shrunk_to_the_shortest_prefix_that_holds_one(tmp_path):
    model = Bigram()
    cfg = config("eagle", top_p=0.8)
    broken = Engine(model, untruncated=True)
    w, case, report, _ = write(tmp_path, cfg, model, broken)
    assert w.reproduced and "a token the truncation drops" in w.trigger, w.trigger
    assert case["decide"] == "outside" and case["tests"] == []
    assert case["settings"]["truncation"] == {"top_k": 0, "top_p": 0.8, "min_p": 0.0, "order": "vllm",
                                              "steps": list(orders()["vllm"])}
    [batch] = case["batches"]
    where = case["outside"]
    assert len(batch["prompts"]) == 1 and batch["max_new_tokens"] == where["position"] + 1
    assert len(batch["prompts"][0]) <= max(case["shrunk_from"]["prompt_lengths"])
    assert where["run"] > 0 and where["control"] == 0
    assert case["shrink"]["engine_runs"] >= 2 and case["shrink"]["log"][0].startswith("start")
    assert "## Shrink log" in report and "top_p 0.8" in report
    assert recounted(case, model)[0]
    again = broken.generate([SimpleNamespace(prompt_ids=tuple(batch["prompts"][0]), max_new_tokens=batch[
        "max_new_tokens"], seed=batch["seeds"][0])], GenerationSettings(1.0, top_p=0.8)).sequences[0].token_ids
    assert list(again) == batch["emitted"][0], "the case's seeds replay the same tokens"
    truncating = Engine(model).generate([SimpleNamespace(prompt_ids=tuple(batch["prompts"][0]), max_new_tokens=16,
                                                         seed=batch["seeds"][0])],
                                        GenerationSettings(1.0, top_p=0.8)).sequences[0].token_ids
    assert not recounted(case, model, [[list(truncating)]])[0], "a sampler that truncates does not reproduce"


def test_a_target_only_on_the_server_still_gets_its_whole_failing_batches_and_says_where_to_recount(tmp_path):
    model = Bigram()
    cfg = config("ngram", local_weights=False)
    row = SimpleNamespace(pvalues={"pit_ks": 0.3, "ngram_top": 1e-6}, outside=None)
    w, case, report, _ = write(tmp_path, cfg, model, Engine(model, to_lookup), local=False, row=row)
    assert "only on the server" in w.trigger and "ngram_top test gives p=1e-06" in w.trigger, w.trigger
    assert len(case["batches"]) == case["shrunk_from"]["batches"] == 8
    assert case["tests"] == ["pit_ks", "ngram_top"] and case["models"]["target"] == "org/target"
    assert "models.local_weights: False" in report and "where the target fits" in report
    assert recounted(case, model)[0]


def test_a_draft_loaded_beside_a_target_on_the_server_keeps_the_draft_tests_the_check_ran(tmp_path):
    """models.local_weights: draft: the served check ran the draft model's tests, so the case's replay does too."""
    model = Bigram()
    cfg = config("draft_model", local_weights="draft")
    row = SimpleNamespace(pvalues={"pit_ks": 0.3, "draft_top": 1e-5, "draft_logprob": 0.2, "draft_ratio": 0.1},
                          outside=None)
    w, case, report, _ = write(tmp_path, cfg, model, Engine(model), local=False, row=row, draft=Bigram(seed=1))
    assert case["tests"] == ["pit_ks", "draft_top", "draft_logprob", "draft_ratio"], case["tests"]
    assert case["models"]["draft"] == "org/draft" and "the draft from `org/draft`" in report
    assert "draft_top test gives p=1e-05" in w.trigger


def test_a_target_only_on_the_server_keeps_the_batch_its_top_k_places_a_token_outside_the_truncation_in(tmp_path):
    model = Bigram()
    cfg = config("eagle", local_weights=False, top_k=3)
    results = run_of(cfg, model, Engine(model))
    for b, ex in enumerate(results.executions):  # the server's top-k: the emitted token alone, but in batch 2
        for s in ex.sequences:
            s.served_top = [{(y + 1) % V if (ex.engine, b) == ("broken", 2) else y: 0.0} for y in s.token_ids]
    row = SimpleNamespace(pvalues={"pit_ks": 0.5, "target_top": 0.4, "target_logprob": 0.3}, outside=64)
    write_sampling_case(tmp_path, "repro/distribution-1", ctx_of(cfg, model, local=False), results, "broken", 4,
                        DESCRIBED, lambda m: None, row=row)
    case = json.loads((tmp_path / "case.json").read_text())
    assert case["decide"] == "outside" and case["tests"] == [] and case["shrunk_from"]["batches"] == 8
    assert [b["seeds"] for b in case["batches"]] == [[s.seed for s in results.executions[2].sequences]]
    assert "64 sampled tokens lie outside the truncation" in case["trigger"], case["trigger"]
