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
import math
import struct
from dataclasses import dataclass
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


def nvidia_smi_bytes() -> int | None:
    """The smallest GPU's memory as ``nvidia-smi`` reports it (a runner whose torch has no CUDA), else None."""
    import shutil
    import subprocess

    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=memory.total", "--format=csv,noheader,nounits"], capture_output=True,
                             text=True, timeout=10, check=True).stdout
        sizes = [int(float(line)) for line in out.split() if line.strip()]
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return min(sizes) << 20 if sizes else None  # MiB


def gpu_memory(gib: float | None = None) -> tuple[int | None, str]:
    """(each GPU's bytes, where that was read): ``--gpu-memory``, else torch.cuda, else nvidia-smi; (None, "")."""
    if gib is not None:
        return int(gib * GIB), "--gpu-memory"
    for read, said in ((gpu_memory_bytes, "torch.cuda"), (nvidia_smi_bytes, "nvidia-smi")):
        size = read()
        if size:
            return size, said
    return None, ""


@dataclass(frozen=True)
class KvNeed:
    """The target's KV cache per token (from its config: layers, KV heads, head dim) and the tokens each batch size
    may hold at once: the batch size x the longest row (prompt plus new tokens), an upper bound."""

    layers: int
    kv_heads: int
    head_dim: int
    stored_bytes: int  # the checkpoint's dtype (torch_dtype): what vLLM's "auto" serves, float32 as float16
    row: int  # the longest row: prompt plus new tokens
    batch_sizes: tuple[int, ...]

    @property
    def tokens(self) -> dict[int, int]:
        return {b: b * self.row for b in sorted(self.batch_sizes)}

    @classmethod
    def of(cls, config, row: int, batch_sizes) -> KvNeed | None:
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        layers = getattr(text, "num_hidden_layers", None)
        heads = getattr(text, "num_attention_heads", None)
        kv_heads = getattr(text, "num_key_value_heads", None) or heads
        head_dim = getattr(text, "head_dim", None) or (
            text.hidden_size // heads if heads and getattr(text, "hidden_size", None) else None)
        if not (layers and kv_heads and head_dim):
            return None
        dtype = str(getattr(text, "dtype", None) or getattr(config, "dtype", None) or "").split(".")[-1]
        stored = 2 if dtype in ("float32", "") else SERVED.get(dtype, 2)
        return cls(int(layers), int(kv_heads), int(head_dim), stored, row, tuple(batch_sizes))

    def bytes_per_token(self, tp: int, pp: int, served_dtype: str | None, kv_dtype: str | None) -> float:
        """Per GPU: K and V of its layers (pipeline stages split them) and its KV heads (tensor-parallel ranks split
        them; each rank holds at least one)."""
        if kv_dtype and kv_dtype.lower().startswith("fp8"):
            width = 1
        elif kv_dtype and kv_dtype.lower() not in ("auto", ""):
            width = SERVED.get(kv_dtype.lower(), 2)
        else:
            width = SERVED.get(served_dtype, self.stored_bytes) if served_dtype else self.stored_bytes
        return 2 * math.ceil(self.layers / pp) * math.ceil(self.kv_heads / tp) * self.head_dim * width


def _kv_text(kv: KvNeed, per_token: float, room: float | None, weights: float | None, field: str,
             share: float, gpu_bytes: int | None, devices: int) -> tuple[str, list[str]]:
    """The KV cache each batch size needs per GPU, and whether weights plus it fit the share (where both are
    known)."""
    need = {b: t * per_token for b, t in kv.tokens.items()}
    text = (f"; the KV cache per GPU (batch size x the longest row, {kv.row} tokens; {per_token / 1024:.0f} KiB a "
            "token): "
            + ", ".join(f"bs {b} {v / GIB:.1f} GiB" for b, v in need.items()))
    if room is None:
        return text, []
    free = room - (weights or 0.0)
    short = [b for b, v in need.items() if v > free]
    fit = [b for b in need if b not in short]
    whose = "weights plus the KV cache" if weights is not None else "the KV cache alone (weights not read)"
    text += (f": {whose} fit" + (f" at bs {'/'.join(map(str, fit))}" if fit else " at no batch size")
             if fit else f": {whose} fit at no batch size")
    if weights is None and fit:
        text += f" if the weights take at most {(room - max(need[b] for b in fit)) / GIB:.1f} GiB per GPU"
    warnings = []
    if short:
        total = f"{room / GIB:.1f} of {gpu_bytes / GIB:.0f} GiB on each of {devices} GPUs, " \
                f"{room * devices / GIB:.0f} GiB in all" if gpu_bytes else f"{room / GIB:.1f} GiB per GPU"
        warnings.append(
            f"{field}: at bs {'/'.join(map(str, short))} {whose} ("
            + ", ".join(f"bs {b}: {((weights or 0.0) + need[b]) / GIB:.1f} GiB per GPU" for b in short)
            + f") exceed its {share:g} share ({total}): the server keeps fewer rows running than the batch size "
            "(it queues or preempts the rest), so that batch size measures a smaller batch; raise the share or "
            "the tensor-parallel size, or drop the batch size")
    return text, warnings


def weight_lines(loaded, gpu_bytes: int | None = None, kv: KvNeed | None = None,
                 size_from: str = "") -> tuple[list[str], list[str]]:
    """(what each launched server's weights, and with ``kv`` the KV cache each batch size needs, take of its share;
    warnings where they do not fit).  ``size_from``: where ``gpu_bytes`` was read."""
    from gate.run.devices import parallel

    lines, warnings = [], []
    for i, e in enumerate(loaded.config.engines):
        preset = e.launch_preset
        for where, ep in e.endpoints():
            share, _ = memory_fraction(preset, ep.launch or []) if preset else (None, False)
            if not ep.launch or share is None:
                continue
            model, tp, dtype = served_model(preset, ep.launch)
            pp = parallel(preset, list(ep.launch))[1]
            folder = (Path(model) if Path(model).is_absolute() else Path.cwd() / model) \
                if model else None
            counted = parameters(folder) if folder is not None and folder.is_dir() else None
            if counted is None and kv is None:
                continue
            field = f"engines[{i}].{where}.launch"
            room = share * gpu_bytes if gpu_bytes else None
            size = f" ({room / GIB:.1f} of {gpu_bytes / GIB:.0f} GiB{f', {size_from}' if size_from else ''})" \
                if room else ""
            unknown = ("" if room else " (the GPUs' size is not known on this machine: the share's bytes are the "
                       "runner's" + ("; --gpu-memory GIB states it)" if kv is not None else ")"))
            per_gpu = None
            if counted is not None:
                n, by_dtype = counted
                per_gpu = served_bytes(by_dtype, dtype) / (tp * pp)
                split = " x ".join(f"{k} {v}" for k, v in (("tensor parallel", tp), ("pipeline parallel", pp)) if v > 1)
                text = (f"{field}: {n / 1e9:.2f} B parameters, {per_gpu / GIB:.2f} GiB of weights per GPU"
                        + (f" ({split})" if split else "") + f" against a {share:g} share of its memory")
                if room:
                    text += f"{size}: {max(0.0, room - per_gpu) / GIB:.1f} GiB left for the KV cache and activations"
                    if per_gpu > room:
                        warnings.append(f"{field}: its weights ({per_gpu / GIB:.1f} GiB per GPU) do not fit its "
                                        f"{share:g} share of a {gpu_bytes / GIB:.0f} GiB GPU: raise the share or the "
                                        "tensor-parallel size")
                else:
                    text += unknown
            else:
                text = (f"{field}: weights not read ({model or 'the model'} is not a folder with safetensors here) "
                        f"against a {share:g} share of its memory" + (size or unknown))
            if kv is not None and (per_gpu is None or room is None or per_gpu <= room):
                got = served(preset, list(ep.launch)) if find(preset) is not None else {}
                kv_dtype = next((v for _, v, _ in got.get("kv_cache_dtype", [])[:1] if v), None)
                more, unfit = _kv_text(kv, kv.bytes_per_token(tp, pp, dtype, kv_dtype), room, per_gpu, field, share,
                                       gpu_bytes, tp * pp)
                text += more
                warnings += unfit
            lines.append(text)
    return lines, warnings


__all__ = ["KvNeed", "gpu_memory", "gpu_memory_bytes", "nvidia_smi_bytes", "parameters", "served_bytes",
           "served_model", "weight_lines"]
