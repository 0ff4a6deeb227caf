"""What a measurement depends on: hardware, library versions, models, config and suite.

Two results are comparable for timing only when their ``hardware`` matches;
outputs are comparable when models, dtype and generation settings match.
"""

from __future__ import annotations

import os
import platform
import re
import sys

import torch

import gate
from gate.io.documents import short_digest


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def hardware(device: torch.device) -> dict:
    hw = {
        "device_type": device.type,
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "machine": platform.machine(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        hw["gpu"] = props.name
        hw["gpu_memory_bytes"] = int(props.total_memory)
        hw["cuda"] = torch.version.cuda
    return hw


def libraries() -> dict:
    import transformers

    return {
        "specguard": gate.__version__,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }


digest = short_digest  # every fingerprint of a value (configs, cache keys, anchors) is one rule


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def baseline_key(given: str | None, configured: str | None, hw: dict) -> str:
    """The key a run's baseline is stored and looked up under: ``--hardware-key`` (``given``), else
    ``baseline.hardware_key`` (``configured``), else read off the hardware (:func:`hardware_key`)."""
    return given or configured or hardware_key(hw)


def hardware_key(hw: dict) -> str:
    """The part of the hardware that timing depends on, as a readable file-name-safe key.

    ``cuda-nvidia-h100-80gb-hbm3`` on a GPU runner (the CPU does not time the GPU's work);
    ``cpu-intel-r-xeon-r-processor-2c-2t`` on a CPU (model, cores, torch threads).  Baselines
    are stored per key, so one repository can hold an A100 and an H100 runner's side by side.
    """
    device = hw.get("device_type") or "cpu"
    if hw.get("gpu"):
        return _slug(f"{device}-{hw['gpu']}")[:100]
    return _slug(f"{device}-{hw.get('cpu') or 'unknown'}-{hw.get('cpu_count')}c-{hw.get('torch_threads')}t")[:100]
