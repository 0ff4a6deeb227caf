"""The anchor and the refusals through the CLI, on tiny pairs saved with the demo tokenizer.

* A sliding-window Mistral pair gates with its reference anchored to ``generate()``
  (the tokenizer has no pad token; the target's generation config lists two EOS ids).
* The anchor is cached: a draft-only change pays nothing.
* A reference made deliberately wrong is caught by the anchor: exit 2, before any verdict.
* An ALiBi (bloom) pair is refused at load: exit 2, its model_type, why, and what works.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from gate.cli import main
from gate.engines.layout import RaggedBatch
from gate.inputs.config import PACKAGE_DIR

DEMO = PACKAGE_DIR / "demo" / "target"
VOCAB = 2048  # the demo tokenizer's

CONFIG = """\
version: 1
models:
  target: {path: "%(target)s"}
  draft: {path: "%(draft)s"}
  device: cpu
batching: {batch_sizes: [1, 2]}
generation: {max_new_tokens: 24}
suite: {max_prompts_per_slice: 1}
engines:
  - type: speculative
checks:
  speedup: {enabled: false}  # the anchor is what this gates: no timing
output: {dir: out, cache_dir: cache}
"""


def save_pair(root, model_type: str, eos_ids=None, draft_seed: int = 1, **extra):
    """A 2-layer target (with the demo tokenizer, pad token removed) and a 1-layer draft (no tokenizer: shares
    the target's), random init."""
    kw = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=1024, bos_token_id=1, eos_token_id=2, initializer_range=0.3, **extra)
    paths = {}
    for role, layers, seed in (("target", 2, 0), (f"draft{draft_seed}", 1, draft_seed)):
        torch.manual_seed(seed)
        cfg = AutoConfig.for_model(model_type, num_hidden_layers=layers, n_layer=layers, **kw)
        model = AutoModelForCausalLM.from_config(cfg).eval()
        if role == "target" and eos_ids:
            model.generation_config.eos_token_id = list(eos_ids)
        path = root / role
        model.save_pretrained(path)
        paths[role.rstrip("0123456789")] = path
    target = paths["target"]
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(DEMO / f, target / f)
    tok_cfg = json.loads((target / "tokenizer_config.json").read_text())
    tok_cfg.pop("pad_token", None)  # a tokenizer without a pad token
    (target / "tokenizer_config.json").write_text(json.dumps(tok_cfg))
    return paths["target"], paths["draft"]


def write_config(tmp_path, target, draft, name="specguard.yaml"):
    path = tmp_path / name
    path.write_text(CONFIG % {"target": target, "draft": draft})
    return path


@pytest.fixture(scope="module")
def mistral(tmp_path_factory):
    root = tmp_path_factory.mktemp("mistral")
    target, draft = save_pair(root, "mistral", eos_ids=(2, 7), sliding_window=8)
    _, other_draft = save_pair(root / "other", "mistral", sliding_window=8, draft_seed=5)
    return target, draft, other_draft


@pytest.mark.slow
def test_a_sliding_window_mistral_pair_gates_with_its_reference_anchored(mistral, tmp_path, capsys):
    target, draft, other_draft = mistral
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(target).pad_token_id is None, "the test needs a tokenizer without pad"
    code = main(["gate", str(write_config(tmp_path, target, draft)), "--threads", "1"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert "Traceback" not in out + err
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["settings"]["eos_token_ids"] == [2, 7]
    anchor = results["anchor"]
    assert anchor["model_type"] == "mistral" and anchor["prompts"] == 3 and anchor["cached"] is False
    assert anchor["identical"] + anchor["near_ties"] == 3 and anchor["seconds"] > 0
    line = f"reference anchored to transformers.generate: {anchor['identical']}/3 prompts identical"
    assert line in (tmp_path / "out" / "summary.md").read_text()
    assert line in out + err  # the run says it as it goes
    assert "anchor" in json.loads((tmp_path / "out" / "phases.json").read_text())["seconds"]

    # A draft-only change pays nothing: the anchor is keyed by the target, never the draft.
    code = main(["run", str(write_config(tmp_path, target, other_draft, "draft-only.yaml")),
                 "--out", str(tmp_path / "again"), "--threads", "1"])
    again = json.loads((tmp_path / "again" / "results.json").read_text())
    assert code == 0 and again["anchor"]["cached"] is True and again["anchor"]["seconds"] == 0
    assert again["anchor"]["key"] == anchor["key"]


@pytest.mark.slow
def test_a_wrong_reference_is_caught_by_the_anchor_before_any_verdict(mistral, tmp_path, capsys, monkeypatch):
    """Positions off by one after the prompt: the reference is wrong; the anchor stops the run with exit 2."""
    target, draft, _ = mistral
    right = RaggedBatch.positions
    monkeypatch.setattr(RaggedBatch, "positions", lambda self, new_valid: right(self, new_valid) + (self.length > 0))
    code = main(["gate", str(write_config(tmp_path, target, draft)), "--threads", "1"])
    out, err = capsys.readouterr()
    assert code == 2, out + err
    assert "Traceback" not in out + err
    assert "disagrees with transformers.generate()" in err and "mistral" in err and "sliding window 8" in err
    assert "on prompt '" in err and "at output position" in err and "type: http" in err
    for later in ("checks.json", "verdict.json", "summary.md"):
        assert not (tmp_path / "out" / later).exists(), f"{later} written after the anchor failed"
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["status"] == "failed" and not results["executions"]


def test_an_alibi_pair_is_refused_at_load_with_exit_2(tmp_path, capsys):
    target, draft = save_pair(tmp_path, "bloom", n_head=4)
    code = main(["gate", str(write_config(tmp_path, target, draft)), "--threads", "1"])
    out, err = capsys.readouterr()
    assert code == 2, out + err
    assert "Traceback" not in out + err
    assert "models.target.path" in err and "'bloom'" in err and "ALiBi" in err
    assert "type: http" in err and "http.reference" in err  # what works instead
    assert not (tmp_path / "out" / "results.json").exists()


@pytest.mark.slow
def test_differences_within_the_tolerance_are_near_ties_and_beyond_it_stop_the_run(mistral, tmp_path, monkeypatch):
    """The near-tie rule decides: the same wrong reference is a near-tie under a huge fixed tolerance, and a
    confident difference (exit 2's AnchorError) under the measured one."""
    from gate.engines.base import GenerationSettings
    from gate.engines.reference import ReferenceEngine
    from gate.errors import AnchorError
    from gate.inputs.config import parse_config
    from gate.inputs.models import load_pair
    from gate.run.anchor import Anchor
    from gate.run.plan import PromptInfo

    target, draft, _ = mistral
    loaded = parse_config(CONFIG % {"target": target, "draft": draft}, tmp_path / "specguard.yaml")
    pair = load_pair(loaded)
    g = torch.Generator().manual_seed(0)
    prompts = [PromptInfo(i, f"p{i}", "s", "0-127", tuple(torch.randint(3, VOCAB, (n,), generator=g).tolist()), 12)
               for i, n in enumerate((5, 30, 12, 20))]
    right = RaggedBatch.positions
    monkeypatch.setattr(RaggedBatch, "positions", lambda self, new_valid: right(self, new_valid) + (self.length > 0))
    settings = GenerationSettings(0.0, 4, ())
    reference = ReferenceEngine(pair.target.model, pair.device)

    lenient = Anchor(pair, reference, tmp_path / "cache", fixed_tolerance=1e9).run(prompts, settings, {"c": 1})
    assert lenient.prompts == 3 and lenient.identical < 3
    assert lenient.near_ties == 3 - lenient.identical
    assert all(d.near_tie and abs(d.logit_gap) > 0 for d in lenient.differences)
    assert (tmp_path / "cache" / "anchor" / f"{lenient.key}.json").exists()

    with pytest.raises(AnchorError) as info:
        Anchor(pair, reference, tmp_path / "cache2", fixed_tolerance=None).run(prompts, settings, {"c": 1})
    [problem] = info.value.problems
    assert problem.field == "models.target.path" and "near-tie tolerance" in problem.message
    assert not (tmp_path / "cache2" / "anchor").exists(), "a failed anchor must not be cached"
