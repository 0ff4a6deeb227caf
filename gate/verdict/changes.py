"""What changed between the run and the baseline it is judged against, beyond the models: the config fields a
reviewer should see (k, the batch sizes, the token budget, the suite), each as base and head."""

from __future__ import annotations

from typing import Any

from gate.verdict.baseline import Baseline
from gate.verdict.doc import Changed
from gate.verdict.summary import RunSummary


def what_changed(head: RunSummary, baseline: Baseline | None) -> list[Changed]:
    """Draft, target and batching settings, base vs head."""
    config = head.config.model_dump(mode="json")
    out: list[Changed] = []
    if head.paired is not None:
        for path in (("models", "draft", "path"), ("models", "draft", "dtype"), ("models", "target", "path"),
                     ("models", "target", "dtype"), ("speculation", "num_draft_tokens"),
                     ("batching", "batch_sizes")):
            b, h = _get(head.paired.config, path), _get(config, path)
            if b != h:
                out.append(Changed(what=".".join(path), base=str(b), head=str(h)))
        return out
    if baseline is None:
        return out
    for role in ("target", "draft"):
        b = baseline.fingerprint.models.get(role)
        h = head.models.get(role)
        spec = _get(config, ("models", role, "path"))
        if b is None or h is None:
            continue
        if b.fingerprint != h["fingerprint"]:
            out.append(Changed(what=f"{role} model", base=f"{b.name} ({b.fingerprint})",
                               head=f"{spec} ({h['fingerprint']})"))
        if b.dtype != h["dtype"]:
            out.append(Changed(what=f"{role} dtype", base=b.dtype, head=h["dtype"]))
    for name in ("num_draft_tokens", "batch_sizes", "max_new_tokens"):
        b, h = getattr(baseline.settings, name), getattr(head.measured.settings, name)
        if b != h:
            out.append(Changed(what=name, base=str(b), head=str(h)))
    for lib in ("torch", "transformers"):
        b, h = baseline.fingerprint.libraries.get(lib), head.measured.fingerprint.libraries.get(lib)
        if b != h:
            out.append(Changed(what=lib, base=str(b), head=str(h)))
    stacks_b, stacks_h = baseline.fingerprint.stacks, head.measured.fingerprint.stacks
    for name in sorted(set(stacks_b) & set(stacks_h)):  # a stack upgrade explains a speed (or output) change
        b, h = stacks_b[name], stacks_h[name]
        if b.version != h.version:
            out.append(Changed(what=f"{name} server version", base=str(b.version), head=str(h.version)))
        if b.launch != h.launch and b.launch is not None and h.launch is not None:
            out.append(Changed(what=f"{name} server launch line", base=" ".join(b.launch),
                               head=" ".join(h.launch)))
    return out


def _get(d: dict, path: tuple) -> Any:
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


__all__ = ["what_changed"]
