"""A launched server's weights against the GPU memory share its line claims (issue 48, item 5): the parameters
from the model's safetensors headers (no tensor read), served in the line's dtype, split over tensor parallel."""

from __future__ import annotations

import torch
from safetensors.torch import save_file

from gate.inputs.config import parse_config
from gate.run.weights import served_bytes, served_model, weight_lines

GIB = 1 << 30


def test_a_launch_line_names_its_model_tensor_parallel_size_and_dtype():
    assert served_model("vllm", ["vllm", "serve", "org/m", "--tensor-parallel-size", "4", "--dtype", "bfloat16"]) \
        == ("org/m", 4, "bfloat16")
    assert served_model("vllm", ["python", "-m", "vllm.entrypoints.openai.api_server", "--model=/m", "-tp", "2"]) \
        == ("/m", 2, None)
    assert served_model("sglang", ["python", "-m", "sglang.launch_server", "--model-path", "/m", "--tp", "8"]) \
        == ("/m", 8, None)
    assert served_bytes({"F32": 10}, None) == 20, "vLLM's auto serves a float32 checkpoint in float16"
    assert served_bytes({"BF16": 10}, "float32") == 40 and served_bytes({"BF16": 10}, None) == 20


def test_plan_states_each_launched_models_weights_per_gpu_and_warns_where_they_do_not_fit(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    save_file({"a": torch.zeros(1024, 512, dtype=torch.bfloat16), "b": torch.zeros(512, dtype=torch.float32)},
              str(model / "model.safetensors"))
    line = (f'["vllm", "serve", "{model}", "--tensor-parallel-size", "2", "--dtype", "bfloat16", '
            '"--gpu-memory-utilization", "0.5", "--port", "8000"]')
    loaded = parse_config(f"""\
version: 1
models: {{target: {{path: "specguard:demo/target"}}, draft: {{path: "specguard:demo/draft"}}, device: cuda}}
engines:
  - type: http
    name: s
    http:
      server: {{url: "http://127.0.0.1:8000", launch: {line}}}
      reference: {{url: "http://127.0.0.1:8001", launch: ["bash", "-c", "./start.sh"]}}
""", tmp_path / "specguard.yaml")
    params = 1024 * 512 + 512
    per_gpu = params * 2 / 2  # bfloat16, tensor parallel 2
    lines, unfit = weight_lines(loaded, None)
    assert lines == [f"engines[0].http.server.launch: {params / 1e9:.2f} B parameters, {per_gpu / GIB:.2f} GiB of "
                     "weights per GPU (tensor parallel 2) against a 0.5 share of its memory (the GPUs' size is not "
                     "known on this machine: the share's bytes are the runner's)"], lines
    assert not unfit, "a line the gate cannot read (bash -c) makes no claim, and with no GPU size no warning"
    lines, unfit = weight_lines(loaded, 80 * GIB)
    assert lines[0].endswith(f"(40.0 of 80 GiB): {(40 * GIB - per_gpu) / GIB:.1f} GiB left for the KV cache and "
                             "activations"), lines
    lines, unfit = weight_lines(loaded, 512 * 1024)  # a GPU smaller than the weights' half
    assert unfit and "do not fit its 0.5 share" in unfit[0], unfit
