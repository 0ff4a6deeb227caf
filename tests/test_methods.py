"""Every speculation method, not only draft models (issue 47): the method in the config and on the launch line, the
draft optional, the n-gram lookup recomputed, and its draft-side test's size and power."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gate.checks import distribution as dist
from gate.engines.proposers import NGRAM_TESTS, NgramLookup, proposer_for
from gate.errors import ConfigError
from gate.inputs.config import parse_config
from gate.inputs.launch import mismatches, read_launch
from gate.inputs.methods import METHODS

HEAD = """\
version: 1
models:
  target: {path: "specguard:demo/target"}
%(draft)s  local_weights: %(weights)s
speculation: {num_draft_tokens: 4%(speculation)s}
engines:
%(engines)s"""
HTTP = """  - type: http
    http:
      preset: %(preset)s
      server: {url: "http://127.0.0.1:8000", launch: %(launch)s}
      reference: {url: "http://127.0.0.1:8001"}
"""


def config(draft: bool = False, speculation: str = "", engines: str = "  - type: speculative\n",
           weights: str = "true"):
    text = HEAD % {"draft": '  draft: {path: "specguard:demo/draft"}\n' if draft else "", "weights": weights,
                   "speculation": speculation, "engines": engines}
    return parse_config(text, "specguard.yaml")


def problems(**kw) -> list[str]:
    with pytest.raises(ConfigError) as err:
        config(**kw)
    return [f"{p.field}: {p.message} ({p.hint})" for p in err.value.problems]


def served(preset: str, launch: list[str]) -> str:
    return HTTP % {"preset": preset, "launch": json.dumps(launch)}


VLLM_NGRAM = ["vllm", "serve", "m", "--speculative-config",
              json.dumps({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
                          "prompt_lookup_min": 2})]


def test_a_draft_model_config_is_unchanged_and_a_config_without_draft_or_method_is_refused():
    loaded = config(draft=True)
    assert loaded.config.method.name == "draft_model"
    said = problems()
    assert said[0].startswith("models.draft: required field is missing") and "speculation.method" in said[0]


def test_a_method_without_a_draft_model_validates_and_a_draft_beside_it_is_refused_with_the_fix():
    ok = config(speculation=", method: ngram", engines=served("vllm", VLLM_NGRAM), weights="false")
    assert ok.config.models.draft is None and isinstance(proposer_for(ok.config), NgramLookup)
    said = problems(draft=True, speculation=", method: ngram", engines=served("vllm", VLLM_NGRAM), weights="false")
    assert any(s.startswith("models.draft: method ngram proposes without a draft model") and "drop models.draft" in s
               for s in said), said
    assert any("engines[0].type: the speculative engine runs draft_model" in s
               for s in problems(speculation=", method: ngram")), "the gate's own engine needs a draft model"
    assert config(speculation=", method: ngram", engines="  - type: hf_assisted\n").config.method.name == "ngram"
    head = config(speculation=', method: eagle3, head: "org/eagle3-head"', engines=served("vllm", ["vllm"]),
                  weights="false")
    assert head.config.speculation.head == "org/eagle3-head"
    assert any(s.startswith("speculation.head: method ngram has no head")
               for s in problems(speculation=', method: ngram, head: "x"', engines="  - type: hf_assisted\n"))
    assert any(s.startswith("models.local_weights: 'draft' loads the draft model here")
               for s in problems(speculation=", method: eagle", engines=served("vllm", ["vllm"]), weights="draft"))


@pytest.mark.parametrize("speculation", [", method: ngram", ', method: eagle, head: "specguard:demo/eagle"'])
def test_validate_and_plan_read_a_config_with_no_draft_model(tmp_path, speculation):
    """`specguard validate` and `plan` read each model's config without its weights: with no models.draft they
    read the target's alone (they raised AttributeError on the missing draft)."""
    from gate.run.estimate import plan_config
    from gate.run.validate import validate

    launch = VLLM_NGRAM if "ngram" in speculation else \
        ["vllm", "serve", "m", "--speculative-config", json.dumps({"method": "eagle", "model": "h",
                                                                   "num_speculative_tokens": 4})]
    path = tmp_path / "specguard.yaml"
    path.write_text(HEAD % {"draft": "", "weights": "false", "speculation": speculation,
                            "engines": served("vllm", launch)})
    assert validate(str(path)) is not None
    report = plan_config(str(path))
    assert any("launched by the gate" in line for line in report.servers), report.servers


def test_a_launch_line_that_runs_another_method_is_refused_naming_the_fix():
    """The demo draft in models.draft beside a vLLM server launched with method ngram validated OK and its draft-side
    tests measured a model that proposed nothing (issue 47)."""
    said = problems(draft=True, engines=served("vllm", VLLM_NGRAM), weights="false")
    assert any("the method differs: --speculative-config method gives ngram, the config gives draft_model" in s
               and "drop models.draft" in s for s in said), said
    eagle = ["vllm", "serve", "m", "--speculative-config", json.dumps({"method": "eagle3", "model": "org/head",
                                                                       "num_speculative_tokens": 4})]
    said = problems(speculation=", method: ngram", engines=served("vllm", eagle), weights="false")
    assert any("gives eagle3, the config gives ngram" in s for s in said), said
    sglang = ["python", "-m", "sglang.launch_server", "--speculative-algorithm", "EAGLE3",
              "--speculative-draft-model-path", "org/head", "--speculative-num-steps", "4"]
    spec = read_launch("sglang", sglang)
    assert (spec.method, spec.draft, spec.k) == ("eagle3", None, 4)
    assert read_launch("vllm", ["--speculative-config", json.dumps({"method": "deepseek_mtp"})]).method == "mtp"
    assert read_launch("llamacpp", ["llama-server", "-md", "d.gguf"]).method == "draft_model"
    assert mismatches("vllm", VLLM_NGRAM, 4, None, "server", "ngram", (2, 5)) == [
        "the n-gram lookup differs: the launch line's prompt_lookup_max is 4, speculation.prompt_lookup_max is 5: "
        "make them equal (or drop the config's, which then reads the line's)"]
    assert mismatches("vllm", VLLM_NGRAM, 4, None, "reference", "ngram")[0].startswith(
        "the reference's launch line speculates")


def test_the_methods_table_names_what_each_can_recompute_here():
    from gate.engines.proposers import _PROPOSERS, NotHere, Proposer

    assert set(_PROPOSERS) == set(METHODS), "every method has its proposer class"
    assert {m for m, cls in _PROPOSERS.items() if not issubclass(cls, NotHere)} == {"draft_model", "ngram"}
    assert all(issubclass(cls, Proposer) for cls in _PROPOSERS.values())
    assert {m for m, d in METHODS.items() if d.head} == {"eagle", "eagle3", "mtp", "medusa"}


def brute_force(context: list[int], k: int, lo: int, hi: int) -> list[int]:
    best = None
    for n in range(lo, hi + 1):
        if n >= len(context):
            break
        starts = [s for s in range(len(context) - n) if context[s:s + n] == context[-n:]]
        if starts:
            best = (n, starts[0])
    return [] if best is None else context[best[1] + best[0]:best[1] + best[0] + k]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=40), st.integers(1, 5), st.integers(1, 3),
       st.integers(0, 3))
def test_the_lookup_is_the_longest_n_gram_at_its_earliest_occurrence(context, k, lo, extra):
    assert NgramLookup(lo, lo + extra).propose(context, k) == brute_force(context, k, lo, lo + extra)


def test_the_lookup_proposes_what_transformers_prompt_lookup_proposes():
    """An independent implementation: transformers' PromptLookupCandidateGenerator (n from its max down to 1)."""
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    rng = random.Random(3)
    for _ in range(200):
        context = [rng.randrange(6) for _ in range(rng.randrange(2, 40))]
        gen = PromptLookupCandidateGenerator(num_output_tokens=4, max_matching_ngram_size=2, max_length=1000)
        ids, _ = gen.get_candidates(torch.tensor([context]))
        theirs = ids[0, len(context):].tolist()
        assert NgramLookup(1, 2).propose(context, 4) == theirs, context


def leaning_run(lean: float, n: int, seed: int, vocab: int = 24):
    """Tokens sampled position by position, mixed towards the n-gram lookup's proposal by ``lean`` (0: exact draws
    from p), after a repetitive prompt; p at each position, the tokens and the proposals."""
    g = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    prompt = [int(t) for t in torch.randint(0, 6, (60,), generator=g)]
    proposer = NgramLookup(1, 3)
    context, ps, ys = list(prompt), [], []
    for _ in range(n):
        p = torch.softmax(torch.randn(vocab, generator=g, dtype=torch.float64) * 1.5, -1)
        found = proposer.propose(context, 1)
        mix = p.clone()
        if found and lean:
            mix = (1 - lean) * p
            mix[found[0]] += lean
        y = int(rng.choice(vocab, p=(mix / mix.sum()).numpy()))
        ps.append(p)
        ys.append(y)
        context.append(y)
    p = torch.stack(ps)
    q = proposer.q([(tuple(prompt), tuple(ys))], [p], None)[0]
    return p, q, torch.tensor(ys)


def test_the_n_gram_test_catches_a_sampler_that_leans_towards_the_proposal_and_passes_the_correct_one():
    tests = NGRAM_TESTS
    caught = sum(dist.rejects(dist.observed_pvalues(dist.analyze_distributions(*leaning_run(0.15, 400, s)),
                                                    np.random.default_rng(s + 1000), tests), 0.01) for s in range(10))
    assert caught >= 9, caught
    false = sum(dist.rejects(dist.observed_pvalues(dist.analyze_distributions(*leaning_run(0.0, 400, s)),
                                                   np.random.default_rng(s + 1000), tests), 0.01) for s in range(10))
    assert false == 0, false


def test_a_served_targets_outcomes_carry_the_lookups_proposal_as_a_point_mass():
    """Scored by the reference server, the outcomes are its top-k by rank and the rest: the proposal's outcome is its
    rank, "the rest" when the server did not list it, the top outcome where the lookup proposes nothing."""
    prompt, tokens = (1, 2, 3, 1, 2), [3, 9]  # after ...1, 2 the lookup proposes 3; after ...2, 3 it proposes 1
    tops = [{3: -0.1, 7: -2.0}, {5: -0.5, 6: -1.0}]
    q = NgramLookup(1, 2).outcomes([(prompt, tokens, [-0.1, -3.0], tops)], 3)
    assert q.tolist() == [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]


@pytest.mark.slow
@pytest.mark.parametrize("variant", [None, "lookup-lean"])
def test_a_prompt_lookup_case_replays_the_engine_its_type_described(demo_pair, demo_prompts, variant):
    """Issue 47, item 7: an hf_assisted case had no replay although its REPORT.md said to run one.  Its type now
    describes the engine (prompt lookup, its n-gram size, the mutant) and its replay function rebuilds the same one."""
    import importlib

    from helpers import demo_config

    from gate.engines import engine_type
    from gate.engines.base import GenerationSettings, Request
    from gate.engines.hf_assisted import PromptLookupEngine
    from gate.engines.mutants import LOOKUP_MUTANTS

    cls = LOOKUP_MUTANTS[variant] if variant else PromptLookupEngine
    engine = cls(demo_pair.target.model, demo_pair.device, demo_pair.tokenizer.pad_token_id or 0,
                 lookup=NgramLookup(1, 2))
    kind = engine_type("hf_assisted")
    described = kind.case_engine(None, engine, demo_config(), demo_pair, "lookup", variant=variant)
    assert described["replay"] == "function" and described["ngram"] == [1, 2]
    assert kind.report_lines(described) == ["python replay.py --engine prompt-lookup   # the correct prompt lookup: "
                                             "'not reproduced'"]
    settings = {"temperature": 0.0, "num_draft_tokens": 4, "eos_token_ids": []}
    module, _, name = described["callable"].partition(":")
    replay = getattr(importlib.import_module(module), name)
    prompts = [list(p[:40]) for p in demo_prompts[:2]]
    for prompt in prompts:  # batch size 1, as the engine runs
        own = engine.generate([Request(tuple(prompt), 8)], GenerationSettings(0.0, 4, ())).sequences[0].token_ids
        assert replay(described, [prompt], [0], 8, settings) == [list(own)]


def test_with_no_lengths_configured_the_check_recomputes_the_lookup_the_in_process_engine_runs():
    """Issue 54, item 5: the in-process engine fell back to transformers' lookup (n from 2 down to 1) while the check
    modelled vLLM's (5 and 5), so with no lengths configured the check recomputed a proposer that did not run.  Both
    now build the one NgramLookup from the config: the same lengths (vLLM's defaults) and the same proposals."""
    from types import SimpleNamespace

    from gate.engines import engine_type
    from gate.engines.hf_assisted import _LookupCandidates
    from gate.engines.proposers import NGRAM_DEFAULT

    loaded = config(speculation=", method: ngram", engines="  - type: hf_assisted\n")
    pair = SimpleNamespace(target=SimpleNamespace(model=None), draft=None, device=torch.device("cpu"),
                           tokenizer=SimpleNamespace(pad_token_id=0))  # the engine is built, not run: no weights
    engine = engine_type("hf_assisted").build(loaded.config.engines[0], pair, loaded)
    check = dist._proposer(SimpleNamespace(config=loaded.config), draft_loaded=False)
    assert engine.lookup == check == NgramLookup(*NGRAM_DEFAULT) == NgramLookup(5, 5)
    rng = random.Random(5)
    motif = [rng.randrange(50) for _ in range(7)]
    for _ in range(100):  # repetitive enough that 5-grams recur
        context = [t for _ in range(rng.randrange(1, 4)) for t in motif + [rng.randrange(50)]] + motif[:5]
        context += [rng.randrange(50) for _ in range(rng.randrange(3))]
        ids, _ = _LookupCandidates(engine.lookup, 4, 10_000).get_candidates(torch.tensor([context]))
        assert ids[0, len(context):].tolist() == check.propose(context, 4), context
    prompt, out = tuple(motif * 3), tuple(motif[:6])
    assert check.firsts(prompt, out) == [(engine.lookup.propose(list(prompt) + list(out[:t]), 1) or [None])[0]
                                         for t in range(len(out))]


@pytest.mark.slow
def test_the_in_process_engine_proposes_with_the_gates_lookup(demo_pair, demo_prompts):
    """The prompt lookup engine's candidates come from its NgramLookup (not transformers' copy of the lookup), and
    every step's candidates are what the lookup proposes there."""
    from gate.engines.base import GenerationSettings, Request
    from gate.engines.hf_assisted import PromptLookupEngine

    asked: list[tuple[list[int], list[int]]] = []

    class Recording(NgramLookup):
        def propose(self, context, k):
            found = super().propose(context, k)
            asked.append((list(context), found))
            return found

    engine = PromptLookupEngine(demo_pair.target.model, demo_pair.device, demo_pair.tokenizer.pad_token_id or 0,
                                lookup=Recording(1, 2))
    prompt = tuple(demo_prompts[0][:24]) * 2  # a repeated prompt: the lookup finds matches
    seq = engine.generate([Request(prompt, 12)], GenerationSettings(0.0, 4, ())).sequences[0]
    assert asked and any(found for _, found in asked)
    assert all(found == NgramLookup(1, 2).propose(context, 4)[:len(found)] for context, found in asked)
    assert seq.counters.num_draft_tokens == sum(len(found) for _, found in asked)


def test_the_package_has_one_n_gram_lookup():
    """The lookup is implemented once, in gate.engines.proposers.NgramLookup: no module of the gate builds
    transformers' own lookup or sets its n-gram size, and the one proposer class of method ngram is that one."""
    import ast
    from pathlib import Path

    from gate.engines import proposers

    assert proposers._PROPOSERS["ngram"] is NgramLookup and NgramLookup.__module__ == "gate.engines.proposers"
    found = []
    for path in sorted(Path("gate").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else \
                node.arg if isinstance(node, ast.keyword) else node.name if isinstance(node, ast.alias) else None
            if name in ("PromptLookupCandidateGenerator", "max_matching_ngram_size", "ngram_proposal"):
                found.append(f"{path}:{node.lineno if hasattr(node, 'lineno') else '?'} {name}")
            if isinstance(node, ast.ClassDef) and path.name != "proposers.py" and "lookup" in node.name.lower() \
                    and not any(isinstance(b, ast.Name) and b.id in ("PromptLookupEngine", "HFAssistedEngine",
                                                                      "CandidateGenerator") for b in node.bases):
                found.append(f"{path}:{node.lineno} class {node.name}")
    assert not found, found
