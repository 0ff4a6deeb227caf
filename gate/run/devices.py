"""The devices a run holds, for ``specguard plan``'s GPU bill (issue 53, item 3).

The gate launches every server before the first phase and stops them after the last (gate/run/servers.py), and
loads its own models once, so every phase holds the same devices: each launched server's (its launch line's
tensor-parallel times pipeline-parallel size, on the first of its ``CUDA_VISIBLE_DEVICES``, or of the runner's,
where it has them; GPUs 0.. where neither names any) and the gate's own models' (``models.device``, where
``models.local_weights`` loads any).  Device sets are merged, not added: two servers on GPUs 0-3 hold four.  A
server the gate does not launch is not this job's to pay for.  Where ``models.device`` is ``cpu`` the launched
servers are taken as CPU servers, as the plan's memory lines take them.  A bill is wall minutes times the devices
held.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Holder:
    """One thing that holds devices for the whole run."""

    name: str  # "engines[0].http.server", "the gate's own models"
    ids: tuple[str, ...]  # the devices, as the runner numbers them (none: CPU only)
    how: str  # where the count and the ids come from, in words

    def text(self) -> str:
        if not self.ids:
            return f"{self.name}: no GPU, {self.how}"
        n = len(self.ids)
        return f"{self.name}: {n} GPU{'s' if n > 1 else ''} {','.join(self.ids)} ({self.how})"

    def to_json(self) -> dict:
        return {"name": self.name, "devices": list(self.ids), "how": self.how}


def _count(value) -> int | None:
    try:
        n = int(str(value))
    except (TypeError, ValueError):
        return None
    return n if n >= 1 else None


def parallel(preset: str | None, argv: list[str]) -> tuple[int | None, int]:
    """(tensor-parallel size, pipeline-parallel size) as the launch line says them, with the stack's defaults (1);
    tensor parallel None where the line does not start the stack itself or the stack's flag is not a count
    (llama.cpp's split mode: it spreads over every visible GPU) or has no fixed default (TGI without --num-shard
    shards over every visible GPU)."""
    from gate.inputs.launch_checks import served, starts_stack

    if not starts_stack(preset, argv):
        return None, 1
    settings = served(preset, argv)
    tp_flags = settings.get("tensor_parallel") or []
    tp = next((_count(v if v is not None else flag.default) for flag, v, _ in tp_flags[:1]), None)
    pp_flags = settings.get("pipeline_parallel") or []
    pp = next((_count(v if v is not None else flag.default) for flag, v, _ in pp_flags[:1]), None) or 1
    return tp, pp


def _visible(env: dict | None = None) -> list[str] | None:
    value = (env or {}).get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
    if value is None or value.strip() in ("", "all"):
        return None
    return [g.strip() for g in value.split(",") if g.strip()]


def server_holder(name: str, preset: str | None, argv: list[str], env: dict) -> Holder:
    """The devices one launched server holds."""
    tp, pp = parallel(preset, argv)
    visible = _visible(env)
    where = "its CUDA_VISIBLE_DEVICES" if "CUDA_VISIBLE_DEVICES" in (env or {}) else "the runner's CUDA_VISIBLE_DEVICES"
    if tp is None:
        if visible:
            return Holder(name, tuple(visible), f"the line does not say how many: every GPU of {where}")
        return Holder(name, ("0",), "the line does not say how many and nothing names its GPUs: 1 assumed")
    n = tp * pp
    said = f"tensor parallel {tp}" + (f" x pipeline parallel {pp}" if pp > 1 else "")
    if visible:
        short = f"; {where} names only {len(visible)}" if len(visible) < n else ""
        return Holder(name, tuple(visible[:n]), f"{said}, the first of {where}{short}")
    return Holder(name, tuple(str(i) for i in range(n)), said)


def holders(loaded, device: str, prefix: str = "", only_server: bool = False) -> list[Holder]:
    """Every launched server's devices, then the gate's own models' (``device``: where they load on this runner,
    as ``models.device`` resolves here); ``prefix``/``only_server``: paired mode's base config, whose server alone
    is launched."""
    cfg = loaded.config
    cpu = cfg.models.device == "cpu"
    out = []
    for i, e in enumerate(cfg.engines):
        for where, ep in e.endpoints():
            if not ep.launch or (only_server and not where.endswith(".server")):
                continue
            name = f"{prefix}engines[{i}].{where}"
            out.append(Holder(name, (), "models.device: cpu, a CPU server") if cpu else
                       server_holder(name, e.launch_preset, list(ep.launch), dict(ep.env)))
    if only_server:
        return out
    own = {True: "target and draft", "draft": "draft", False: None}[cfg.models.local_weights]
    if own is None:
        out.append(Holder("the gate's own models", (), "models.local_weights: false, none load here"))
    elif not device.startswith(("cuda", "mps")):
        out.append(Holder(f"the gate's own models ({own})", (), f"on {device}"
                          + (" (models.device auto, as it resolves on this machine)"
                             if cfg.models.device == "auto" else "")))
    else:
        index = int(device.split(":")[1]) if ":" in device else 0
        visible = _visible()
        gpu = "mps" if device == "mps" else visible[index] if visible and index < len(visible) else str(index)
        out.append(Holder(f"the gate's own models ({own})", (gpu,), f"models.device {cfg.models.device}"))
    return out


def held(hs: list[Holder]) -> tuple[str, ...]:
    """The devices held by any of ``hs``, each once."""
    return tuple(sorted({d for h in hs for d in h.ids}, key=lambda d: (not d.isdigit(), int(d) if d.isdigit() else 0,
                                                                         d)))


__all__ = ["Holder", "held", "holders", "parallel", "server_holder"]
