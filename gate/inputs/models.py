"""Loading the target/draft pair: device and dtype, compatibility checks, fingerprints.

``trust_remote_code`` is passed through only when the config opts in
(``models.trust_remote_code: true``); it is off by default because the gate
runs on self-hosted runners with repository secrets nearby.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from gate.errors import ModelError, Problem
from gate.inputs.config import LoadedConfig, ModelSpec
from gate.inputs.model_files import fingerprint_model, model_location  # torch-free (gate.inputs.identity)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ModelError(Problem("config", "device is 'cuda' but CUDA is not available on this machine",
                                 field="models.device", hint="use device: auto or cpu"))
    return dev


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    return DTYPES[name]


@dataclass
class LoadedModel:
    role: str  # "target" or "draft"
    model: torch.nn.Module | None  # None with models.local_weights: false (the model runs behind a server)
    spec: ModelSpec
    location: str  # resolved local path or hub id
    fingerprint: str
    config: object = None  # the transformers config (always loaded)
    load_dtype: torch.dtype | None = None

    @property
    def vocab_size(self) -> int:
        return int((self.model.config if self.model is not None else self.config).vocab_size)

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype if self.model is not None else self.load_dtype


@dataclass
class ModelPair:
    target: LoadedModel
    draft: LoadedModel | None  # None: the method proposes without a draft model (gate.inputs.methods)
    tokenizer: object  # a transformers tokenizer
    device: torch.device
    eos_override: tuple[int, ...] | None = None  # replaces the model's EOS (the self-test uses this)

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        if self.eos_override is not None:
            return self.eos_override
        gen = getattr(self.target.model, "generation_config", None)
        ids = gen.eos_token_id if gen is not None else getattr(self.target.config, "eos_token_id", None)
        if ids is None:
            ids = self.tokenizer.eos_token_id
        if ids is None:
            return ()
        return tuple(ids) if isinstance(ids, (list, tuple)) else (int(ids),)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def encode_chat(self, messages: list[dict[str, str]], template: str | None = None) -> list[int]:
        """A chat row's token ids: the messages rendered by ``template`` (else the target tokenizer's own chat
        template, in transformers' sandboxed Jinja) with the generation prompt, then tokenized as the template
        wrote it (its special tokens included, none added).  No template at all is a ValueError."""
        if template is None and not getattr(self.tokenizer, "chat_template", None):
            raise ValueError("the target tokenizer has no chat template")
        text = self.tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False,
                                                  add_generation_prompt=True)
        return self.encode(text)


def _load_one(loaded: LoadedConfig, role: str, device: torch.device):
    from transformers import AutoModelForCausalLM

    cfg = loaded.config.models
    spec: ModelSpec = getattr(cfg, role)
    location = model_location(loaded, spec)
    dtype = resolve_dtype(spec.dtype, device)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            location, revision=spec.revision, dtype=dtype,
            trust_remote_code=cfg.trust_remote_code,
            attn_implementation=cfg.attn_implementation,
        )
    except Exception as exc:  # any loader failure is a problem with this model, said as such
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        offline = os.environ.get("HF_HUB_OFFLINE") == "1"
        local = Path(location).is_dir()
        if offline and not local:
            hint = "HF_HUB_OFFLINE=1 is set, so hub ids must already be in the local cache"
        elif local and any(w in str(exc).lower() for w in ("size mismatch", "mismatched_sizes", "shape")):
            first = "the sizes in config.json do not match the weights (transformers: size mismatch)"
            weights = sorted(f.name for f in Path(location).iterdir() if f.suffix in (".safetensors", ".bin"))
            files = ", ".join(weights) or "the directory"
            hint = (f"{Path(location) / 'config.json'} does not match the weights in {files}: check vocab_size, "
                    "hidden_size and the layer counts")
        else:
            hint = "check the path or hub id, and models.trust_remote_code if the model needs custom code"
        raise ModelError(Problem(str(loaded.source), f"cannot load {role} model {location!r}: "
                                 f"{type(exc).__name__}: {first}", field=f"models.{role}.path", hint=hint)) from None
    model.to(device).eval()
    return LoadedModel(role, model, spec, location, fingerprint_model(location, spec, dtype), model.config, dtype)


def config_only(loaded: LoadedConfig, role: str, device: torch.device) -> LoadedModel:
    """The model's config and fingerprint without its weights (it is served elsewhere)."""
    from transformers import AutoConfig

    spec: ModelSpec = getattr(loaded.config.models, role)
    location = model_location(loaded, spec)
    dtype = resolve_dtype(spec.dtype, device)
    try:
        config = AutoConfig.from_pretrained(location, revision=spec.revision,
                                            trust_remote_code=loaded.config.models.trust_remote_code)
    except Exception as exc:  # any loader failure is a problem with this model, said as such
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        raise ModelError(Problem(str(loaded.source), f"cannot read the {role} model's config {location!r}: {first}",
                                 field=f"models.{role}.path",
                                 hint="with local_weights: false the gate still reads the config and tokenizer")
                         ) from None
    return LoadedModel(role, None, spec, location, fingerprint_model(location, spec, dtype), config, dtype)


def load_tokenizer(loaded: LoadedConfig, location: str, role: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(location, trust_remote_code=loaded.config.models.trust_remote_code)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0]
        raise ModelError(Problem(str(loaded.source), f"cannot load the {role} tokenizer from {location!r}: {first}",
                                 field=f"models.{role}.path",
                                 hint="the model directory needs tokenizer files")) from None


def tokenizer_digest(tok) -> str:
    vocab = sorted(tok.get_vocab().items())
    specials = {"bos": tok.bos_token_id, "eos": tok.eos_token_id, "pad": tok.pad_token_id}
    return hashlib.sha256(json.dumps([vocab, specials]).encode()).hexdigest()[:16]


def check_pair(source: str, target, draft, target_tok, draft_tok) -> None:
    """Refuse a pair whose draft proposes tokens from a different vocabulary."""
    problems = []
    if draft_tok is not None and tokenizer_digest(target_tok) != tokenizer_digest(draft_tok):
        problems.append(Problem(source, "the draft and target tokenizers differ (vocabulary or special tokens), "
                                "so draft token ids would mean different text to the target",
                                field="models.draft.path",
                                hint="use a draft trained with the target's tokenizer"))
    tv, dv = int(target.config.vocab_size), int(draft.config.vocab_size)
    if tv != dv:
        problems.append(Problem(source, f"vocab sizes differ: target {tv}, draft {dv}", field="models.draft.path",
                                hint="the draft's output layer must cover exactly the target's vocabulary"))
    if len(target_tok) > tv:
        problems.append(Problem(source, f"the tokenizer has {len(target_tok)} tokens but the target's vocab "
                                f"size is {tv}", field="models.target.path",
                                hint="the tokenizer does not belong to this model"))
    if problems:
        raise ModelError(problems)


def check_architectures(loaded: LoadedConfig, roles: tuple[str, ...] = ("target", "draft")) -> None:
    """Refuse, before any weights load, a model the gate's in-process engines cannot run exactly (exit 2).

    The target runs in the ragged layout as the reference (unless a serving stack is the reference) and
    in calibration; the draft runs there in the speculative engine and in calibration.  Only the configs
    are read here, so a refused model never costs a weight load (nor fails in it first)."""
    from transformers import AutoConfig

    from gate.inputs.architectures import REFUSED, WORKS_INSTEAD, refusal

    cfg = loaded.config
    in_process = any(e.runs_local_models for e in cfg.engines)
    http_reference = any(e.served_reference is not None for e in cfg.engines)
    runs = {"target": in_process or not http_reference, "draft": in_process}
    problems = []
    for role in roles:
        spec: ModelSpec | None = getattr(cfg.models, role)
        if not runs[role] or spec is None:
            continue
        location = model_location(loaded, spec)
        try:
            config = AutoConfig.from_pretrained(location, revision=spec.revision,
                                                trust_remote_code=cfg.models.trust_remote_code)
        except Exception:  # loading the model reports this, with its field and hint
            continue
        why = refusal(config)
        if why:
            model_type = getattr(config, "model_type", "?")
            problems.append(Problem(str(loaded.source), f"{role} model {location!r} is a {model_type!r} model, which "
                                    f"the gate's reference and speculative engines cannot run exactly: {why}",
                                    field=f"models.{role}.path",
                                    hint=f"{WORKS_INSTEAD}; refused architectures: {', '.join(sorted(REFUSED))}, "
                                         "see docs/engines.md"))
    if problems:
        raise ModelError(problems)


def load_pair(loaded: LoadedConfig, device: torch.device | None = None) -> ModelPair:
    device = device or resolve_device(loaded.config.models.device)
    models = loaded.config.models
    if models.draft is None:  # a method without a draft model: the target alone (its config only, if served)
        if models.target_is_local:
            check_architectures(loaded, ("target",))
        target = _load_one(loaded, "target", device) if models.target_is_local else config_only(loaded, "target",
                                                                                                  device)
        return ModelPair(target, None, load_tokenizer(loaded, target.location, "target"), device)
    if not models.target_is_local:  # the target runs behind a server: its tokenizer and config only
        target = config_only(loaded, "target", device)
        if models.draft_is_local:  # local_weights: draft (the distribution test's draft-aware statistics)
            check_architectures(loaded, ("draft",))
            draft = _load_one(loaded, "draft", device)
        else:
            draft = config_only(loaded, "draft", device)
        return ModelPair(target, draft, load_tokenizer(loaded, target.location, "target"), device)
    check_architectures(loaded)
    target = _load_one(loaded, "target", device)
    draft = _load_one(loaded, "draft", device)
    tok = load_tokenizer(loaded, target.location, "target")
    bare_draft = Path(draft.location).is_dir() and not any(
        (Path(draft.location) / f).exists() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model"))
    # A draft directory without tokenizer files shares the target's tokenizer.
    draft_tok = None if bare_draft else load_tokenizer(loaded, draft.location, "draft")
    check_pair(str(loaded.source), target.model, draft.model, tok, draft_tok)
    return ModelPair(target, draft, tok, device)


def draft_location(loaded: LoadedConfig) -> str:
    """Where a config's draft is (a resolved local path or a hub id), without loading it: what a plug-in is
    told to load (paired mode's base, whose weights the gate itself never needs)."""
    return model_location(loaded, loaded.config.models.draft)


def load_draft_for(loaded: LoadedConfig, pair: ModelPair) -> LoadedModel:
    """Another config's draft, checked against an already loaded pair's target (paired mode)."""
    check_architectures(loaded, ("draft",))
    draft = _load_one(loaded, "draft", pair.device)
    bare = Path(draft.location).is_dir() and not any(
        (Path(draft.location) / f).exists() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model"))
    draft_tok = None if bare else load_tokenizer(loaded, draft.location, "draft")
    check_pair(str(loaded.source), pair.target.model, draft.model, pair.tokenizer, draft_tok)
    return draft
