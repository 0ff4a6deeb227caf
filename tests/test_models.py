"""Loading the pair: missing models, mismatched tokenizers and vocab sizes fail with clear errors."""

from __future__ import annotations

import shutil

import pytest
from transformers import LlamaConfig, LlamaForCausalLM

from gate.errors import ModelError
from gate.inputs.config import PACKAGE_DIR, parse_config
from gate.inputs.models import load_pair

DEMO = PACKAGE_DIR / "demo"


def cfg(tmp_path, target: str, draft: str, extra: str = ""):
    text = f'version: 1\nmodels:\n  target: {{path: "{target}"}}\n  draft: {{path: "{draft}"}}\n  device: cpu\n'
    path = tmp_path / "specguard.yaml"
    path.write_text(text + extra)
    return parse_config(text + extra, path)


@pytest.mark.slow
def test_missing_model_names_the_field(tmp_path):
    with pytest.raises(ModelError) as info:
        load_pair(cfg(tmp_path, str(DEMO / "target"), str(tmp_path / "nowhere")))
    [p] = info.value.problems
    assert p.field == "models.draft.path" and p.message == f"model directory '{tmp_path / 'nowhere'}' does not exist"


def test_hub_id_offline_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError) as info:
        load_pair(cfg(tmp_path, "no-such-org/no-such-model", str(DEMO / "draft")))
    [p] = info.value.problems
    assert p.field == "models.target.path" and "HF_HUB_OFFLINE=1" in p.hint


@pytest.mark.slow
def test_mismatched_tokenizer_is_refused(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    draft = tmp_path / "draft"
    shutil.copytree(DEMO / "draft", draft)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel()
    tok.train_from_iterator(["completely different text " * 50],
                            trainers.BpeTrainer(vocab_size=300, special_tokens=["<pad>", "<s>", "</s>"]))
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", pad_token="<pad>").save_pretrained(draft)
    with pytest.raises(ModelError, match="draft and target tokenizers differ") as info:
        load_pair(cfg(tmp_path, str(DEMO / "target"), str(draft)))
    assert info.value.problems[0].field == "models.draft.path"


@pytest.mark.slow
def test_mismatched_vocab_size_is_refused(tmp_path):
    draft = tmp_path / "draft"
    LlamaForCausalLM(LlamaConfig(vocab_size=1000, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=2)).save_pretrained(draft)
    with pytest.raises(ModelError, match="vocab sizes differ: target 2048, draft 1000"):
        load_pair(cfg(tmp_path, str(DEMO / "target"), str(draft)))


@pytest.mark.slow
def test_trust_remote_code_off_by_default(tmp_path, monkeypatch):
    seen = {}
    import transformers

    real = transformers.AutoModelForCausalLM.from_pretrained

    def spy(*args, **kwargs):
        seen.setdefault("trust", []).append(kwargs.get("trust_remote_code"))
        return real(*args, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", spy)
    load_pair(cfg(tmp_path, str(DEMO / "target"), str(DEMO / "draft")))
    assert seen["trust"] == [False, False]


def test_fingerprint_follows_weights(tmp_path):
    from gate.inputs.models import fingerprint_model

    copy = tmp_path / "t"
    shutil.copytree(DEMO / "draft", copy)
    spec = parse_config(f'models: {{target: {{path: "{copy}"}}, draft: {{path: "{copy}"}}}}', "x.yaml").config
    import torch

    before = fingerprint_model(str(copy), spec.models.target, torch.float32)
    assert before == fingerprint_model(str(copy), spec.models.target, torch.float32)
    assert before != fingerprint_model(str(copy), spec.models.target, torch.bfloat16)
    data = bytearray((copy / "model.safetensors").read_bytes())
    data[-1] ^= 1
    (copy / "model.safetensors").write_bytes(bytes(data))
    assert before != fingerprint_model(str(copy), spec.models.target, torch.float32)


def test_an_unchanged_model_directory_is_hashed_once_per_process(tmp_path, monkeypatch):
    """check compares fingerprints before loading the models, then loads them: one read of the weights."""
    import hashlib

    import torch

    from gate.inputs.models import fingerprint_model

    copy = tmp_path / "t"
    shutil.copytree(DEMO / "draft", copy)
    spec = parse_config(f'models: {{target: {{path: "{copy}"}}, draft: {{path: "{copy}"}}}}', "x.yaml").config
    reads = []
    real = hashlib.file_digest
    monkeypatch.setattr(hashlib, "file_digest", lambda fh, name: reads.append(fh.name) or real(fh, name))
    first = fingerprint_model(str(copy), spec.models.target, torch.float32)
    files = len(reads)
    assert files and fingerprint_model(str(copy), spec.models.target, torch.float32) == first
    assert len(reads) == files
