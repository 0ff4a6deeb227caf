"""A launched server's model weights against the GPU memory share its line claims (issue 48, item 5).

``plan`` reads each launch line the gate starts (vLLM, SGLang): the model it serves, its tensor-parallel size and
dtype, and the share of each GPU's memory it claims.  The weights' bytes come from the model's safetensors headers
(parameter counts and stored dtypes; no tensor is read), served in the line's dtype and split over the
tensor-parallel ranks.  Where the runner sees its GPUs (torch.cuda), the share is a size and what is left for the KV
cache is stated, with a warning where the weights do not fit; elsewhere the line states the weights per GPU and the
share, and claims nothing it cannot know.  A model the runner cannot read (a hub id, no safetensors) gets no line.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from gate.inputs.launch import memory_fraction
from gate.inputs.launch_checks import served
from gate.stacks import find

BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
         "F8_E4M3": 1, "F8_E5M2": 1}
SERVED = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2}
GIB = 1 << 30


def served_model(preset: str, argv: list[str]) -> tuple[str | None, int, str | None]:
    """(the model a launch line serves, its tensor-parallel size, its --dtype) as the line says them (the preset's
    stack: gate/stacks/)."""
    stack = find(preset)
    if stack is None or not stack.reads_launch:
        return None, 1, None
    settings = served(preset, argv)
    model = settings["model"][0][1] if "model" in settings else None
    tp = (settings["tensor_parallel"][0][1] if "tensor_parallel" in settings else None) or "1"
    dtype = settings["dtype"][0][1] if "dtype" in settings else None
    try:
        tp_size = max(1, int(tp))
    except ValueError:
        tp_size = 1
    return model, tp_size, dtype


def parameters(folder: Path) -> tuple[int, dict[str, int]] | None:
    """(parameters, parameters per stored dtype) from the safetensors headers in ``folder``; None: none there."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    total, by_dtype = 0, {}
    for f in files:
        with f.open("rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(size))
        for name, t in header.items():
            if name == "__metadata__":
                continue
            n = 1
            for d in t["shape"]:
                n *= d
            total += n
            by_dtype[t["dtype"]] = by_dtype.get(t["dtype"], 0) + n
    return total, by_dtype


def served_bytes(by_dtype: dict[str, int], dtype: str | None) -> int:
    """The weights' bytes as served: the line's --dtype, else vLLM's "auto" (a float32 checkpoint served in
    float16, any other as stored)."""
    if dtype in SERVED:
        return sum(by_dtype.values()) * SERVED[dtype]
    return sum(n * (2 if d == "F32" else BYTES.get(d, 2)) for d, n in by_dtype.items())


def gpu_memory_bytes() -> int | None:
    """Each visible GPU's memory where the runner sees one (the smallest), else None."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        return min(torch.cuda.get_device_properties(i).total_memory for i in range(torch.cuda.device_count()))
    except Exception:  # no CUDA build, no driver: nothing is known of the GPUs here
        return None


def weight_lines(loaded, gpu_bytes: int | None = None) -> tuple[list[str], list[str]]:
    """(what each launched server's weights take of its share, warnings where they do not fit)."""
    lines, warnings = [], []
    for i, e in enumerate(loaded.config.engines):
        preset = e.launch_preset
        for where, ep in e.endpoints():
            share, _ = memory_fraction(preset, ep.launch or []) if preset else (None, False)
            if not ep.launch or share is None:
                continue
            model, tp, dtype = served_model(preset, ep.launch)
            folder = (Path(model) if Path(model).is_absolute() else Path.cwd() / model) \
                if model else None
            counted = parameters(folder) if folder is not None and folder.is_dir() else None
            if counted is None:
                continue
            n, by_dtype = counted
            per_gpu = served_bytes(by_dtype, dtype) / tp
            field = f"engines[{i}].{where}.launch"
            text = (f"{field}: {n / 1e9:.2f} B parameters, {per_gpu / GIB:.2f} GiB of weights per GPU"
                    + (f" (tensor parallel {tp})" if tp > 1 else "") + f" against a {share:g} share of its memory")
            if gpu_bytes:
                room = share * gpu_bytes
                text += (f" ({room / GIB:.1f} of {gpu_bytes / GIB:.0f} GiB): "
                         f"{max(0.0, room - per_gpu) / GIB:.1f} GiB left for the KV cache and activations")
                if per_gpu > room:
                    warnings.append(f"{field}: its weights ({per_gpu / GIB:.1f} GiB per GPU) do not fit its "
                                    f"{share:g} share of a {gpu_bytes / GIB:.0f} GiB GPU: raise the share or the "
                                    "tensor-parallel size")
            else:
                text += " (the GPUs' size is not known on this machine: the share's bytes are the runner's)"
            lines.append(text)
    return lines, warnings


__all__ = ["gpu_memory_bytes", "parameters", "served_bytes", "served_model", "weight_lines"]
