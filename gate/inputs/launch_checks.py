"""What ``validate`` and ``plan`` check of launch lines beyond k and the draft (gate/inputs/launch.py): the reference's
line against its server's, setting by setting, and what the gate cannot read.

* **The pair.**  The reference is the server's stack with speculation off: the speedup and the noise floor assume
  it.  Each setting of the preset's stack (gate/stacks/: the served model, tensor and pipeline
  parallelism, dtype, quantization, the KV cache's dtype, the longest sequence, the batching budget, the most
  sequences, chunked prefill, the prefix cache, eager mode or graphs, the attention backend, the memory share, GPU
  layers) is read off both lines, a flag left out as the stack's documented default (where the stack picks by
  version or hardware, a line that sets it and one that does not are not known to agree).  A difference that
  changes what is measured is refused (exit 2), the rest (the memory share, the longest sequence) are warnings;
  ``http.allow_differences`` names a deliberate one, which is then a warning.  Either line serving a hub id other
  than ``models.target.path``'s is refused as well.
* **What is not read.**  A line that does not start the stack itself (``bash -c '…'``, a script) gets a note saying
  what is then unchecked; so do flags about speculation and keys of vLLM's speculative config the gate does not
  read; a server's ``disable_by_batch_size`` names the batch sizes it decodes without speculation.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gate.inputs.launch import Read, hub_id, launch_flags, read_launch, read_text, unread
from gate.stacks import find
from gate.stacks.base import SETTINGS, Flag


def starts_stack(preset: str | None, argv: list[str]) -> bool:
    """Whether a launch line starts ``preset``'s server itself (its program or module is one of its words), so that
    its flags are the stack's: a wrapper (``bash -c '…'``, a script) hides them."""
    stack = find(preset)
    return stack is not None and stack.starts(argv)


def unreadable(preset: str | None, argv: list[str]) -> str | None:
    """Why the gate cannot read a launch line's flags, and what is then unchecked; None where it can."""
    unchecked = ("k, the method, the draft or head, and the settings the reference must share with the server "
                 "are not checked against the config or each other")
    stack = find(preset)
    if stack is None or not stack.reads_launch:
        return f"preset {preset}: the gate reads no flags of its launch lines: {unchecked}"
    if starts_stack(preset, argv):
        return None
    if Path(argv[0]).name in ("bash", "sh", "zsh", "dash", "ksh") and "-c" in argv:
        return (f"{Path(argv[0]).name} -c runs a shell line the gate does not read: {unchecked}; write the command "
                f"itself as a list of words ({stack.shown} …)")
    return (f"{argv[0]!r} does not start {preset} itself (expected {stack.shown}): the gate reads the "
            f"line's own words, not what it runs, so where that sets them {unchecked}")


def is_flag(word: str) -> bool:
    """Whether a launch line's word is a flag: not a value such as a negative number or ``-`` (standard input)."""
    if not word.startswith("-") or word == "-":
        return False
    try:
        float(word)
        return False  # a negative number is a value
    except ValueError:
        return True


def _given(flag: Flag, argv: list[str], file: dict, file_wins: bool = False, at: str = "--config"
           ) -> tuple[str | None, str | None]:
    """(the value a line gives ``flag``, the name it was given by), the last one winning; a switch's value is "true"
    or "false"; ``file``: the keys of the line's file of flags (``at``), which the command line overrides unless
    ``file_wins`` (TensorRT-LLM's options file wins).  (None, None): not given."""
    value = where = None
    for i, arg in enumerate(argv):
        name, eq, text = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if name in flag.off:
            value, where = "false", name
        elif name in flag.names:
            where = name
            if flag.switch:
                value = "false" if eq and text.lower() in ("false", "0", "no") else "true"
            elif eq:
                value = text
            elif i + 1 < len(argv) and not is_flag(argv[i + 1]):
                value = argv[i + 1]
            else:
                value = "true"  # given bare (llama.cpp's older -fa)
    if value is None or file_wins:
        for name in flag.names:
            key = name[2:].replace("_", "-")
            if name.startswith("--") and key in file:
                v = file[key]
                value, where = (str(v).lower() if isinstance(v, bool) else str(v)), f"{at} {key}"
                break
    return value, where


def served(preset: str, argv: list[str],
           read: Read = read_text) -> dict[str, list[tuple[Flag, str | None, str | None]]]:
    """Each setting a line of ``preset`` can give: (flag, the value given or None, the name it was given by);
    ``read`` reads a ``--config`` file the line names (by default from the working tree)."""
    stack = find(preset)
    if stack is None:
        return {}
    flags = launch_flags(argv)
    file, at = stack.config_file(flags, read), stack.config_path(flags)
    out = {name: [(flag, *_given(flag, argv, file, stack.file_wins, at[0] if at else "--config"))
                  for flag in flags_] for name, flags_ in stack.settings.items()}
    positional = stack.positional_model(argv)
    if positional is not None and "model" in out and out["model"][0][1] is None:  # `vllm serve MODEL ...`
        out["model"][0] = (out["model"][0][0], *positional)
    return out


_SAME = {"half": "float16", "fp16": "float16", "float": "float32", "fp32": "float32", "bf16": "bfloat16",
         "on": "true", "off": "false", "enabled": "true", "disabled": "false"}


def _norm(value: str) -> str:
    v = value.strip().lower().rstrip("/")
    v = _SAME.get(v, v)
    try:
        f = float(v)
    except ValueError:
        return v
    return str(int(f)) if f.is_integer() else repr(f)


def _same_model(a: str, b: str) -> bool | None:
    """Whether two served models are one: hub ids and paths each by name; a hub id beside a path by its last part
    (None: they may differ, which the gate cannot tell by name)."""
    if hub_id(a) and hub_id(b):
        return hub_id(a) == hub_id(b)
    if not hub_id(a) and not hub_id(b):
        return _norm(os.path.normpath(a)) == _norm(os.path.normpath(b))
    return True if _norm(Path(a).name) == _norm(Path(b).name) else None


@dataclass(frozen=True)
class Difference:
    """A setting on which a launch line departs from what is measured against it."""

    setting: str  # a name of gate.inputs.stack_flags.SETTINGS (what http.allow_differences takes)
    refused: bool  # else a warning
    role: str  # the line that must change: "reference" (against the server's) or "server"
    message: str

    @property
    def hint(self) -> str:
        return (f"make the lines agree, or name a deliberate difference in http.allow_differences: [{self.setting}] "
                "(docs/serving.md, the reference's launch line)")


def _side(flag: Flag, value: str | None, where: str | None) -> str:
    if value is None:
        return (f"default {flag.default} (its line sets no {flag.names[0]})" if flag.default is not None else
                f"{flag.names[0]} left to the stack (it picks by version, hardware or model)")
    if flag.switch:
        return where if value == "true" or where in flag.off else f"{where}={value}"
    return f"{where} {value}"


def pair_differences(preset: str, server: list[str], reference: list[str], target: str | None) -> list[Difference]:
    """Where a reference's launch line departs from its server's (each setting of the preset's table, a flag the
    line leaves out read as the stack's default where it is documented), and where either serves a model other
    than ``models.target.path`` (both hub ids).  Only lines that start the stack themselves are read."""
    out = []
    read = {role: served(preset, argv) for role, argv in (("server", server), ("reference", reference))
            if starts_stack(preset, argv)}
    for role, settings in read.items():
        for _, model, where in settings.get("model", ()):
            if model and target and hub_id(model) and hub_id(target) and hub_id(model) != hub_id(target):
                out.append(Difference("model", True, role, f"the {role}'s {where} serves {model!r}, and "
                                      f"models.target.path is {target!r}: the gate would tokenize, fingerprint and "
                                      "baseline one model while the servers run another"))
    if len(read) < 2:
        return out
    for name, setting in SETTINGS.items():
        pairs = zip(read["server"].get(name, ()), read["reference"].get(name, ()))
        for (flag, s_value, s_where), (_, r_value, r_where) in pairs:
            if s_value is None and r_value is None:
                continue
            s_eff, r_eff = (s_value if s_value is not None else flag.default), \
                (r_value if r_value is not None else flag.default)
            if name == "model":
                same = _same_model(s_eff, r_eff) if s_eff and r_eff else None
                if same:
                    continue
                refused = same is False
                why = setting.distorts if refused else ("they may name one model in two forms, which the gate "
                                                        "cannot tell by name: check by hand")
            else:
                if s_eff is not None and r_eff is not None and _norm(s_eff) == _norm(r_eff):
                    continue
                refused, why = setting.refused, setting.distorts
            out.append(Difference(name, refused, "reference", f"{name} differs: the reference's "
                                  f"{_side(flag, r_value, r_where)}, the server's {_side(flag, s_value, s_where)}: "
                                  f"{why}"))
    return out


def disabled_sizes(preset: str | None, argv: list[str], batch_sizes: list[int]) -> str | None:
    """What a server's ``disable_by_batch_size`` (vLLM: in its speculative config, or the older flag) does to the
    run: the batch sizes at or above it decode without speculation; None where it is not set."""
    if find(preset) is None:
        return None
    try:
        spec = read_launch(preset, argv)
    except ValueError:
        return None  # the config's validation names the malformed line
    if spec.disable_at is None:
        return None
    off = [b for b in batch_sizes if b >= spec.disable_at]
    if not off:
        return (f"{spec.disable_flag} {spec.disable_at} turns speculation off while {spec.disable_at} or more "
                f"requests are running; every batch size here ({'/'.join(map(str, batch_sizes))}) is below it, but "
                "a request-rate replay (checks.traffic) may reach it")
    return (f"{spec.disable_flag} {spec.disable_at} turns speculation off while {spec.disable_at} or more requests "
            f"are running: batch size {'/'.join(map(str, off))} decodes without speculation on the server (until "
            "its wave's shorter requests finish), so its cells time mostly plain decoding against plain decoding (a "
            "speedup of about 1) and its outputs test little speculation; gate batch sizes below "
            f"{spec.disable_at}, or drop the key to gate speculation there")


def line_notes(preset: str | None, argv: list[str], batch_sizes: list[int], role: str = "server") -> list[str]:
    """What ``validate`` and ``plan`` say of one launch line: a line the gate cannot read, flags about speculation
    and keys of vLLM's speculative config it does not read, and the batch sizes a server decodes without
    speculation."""
    why = unreadable(preset, argv)
    if why is not None:
        return [why]
    out = unread(preset, argv)
    try:
        spec = read_launch(preset, argv)
    except ValueError:
        return out  # the config's validation names the malformed line
    if spec.unread_keys:
        out.append(f"{spec.spec_flag}: the gate does not read its key{'s' if len(spec.unread_keys) > 1 else ''} "
                   f"{', '.join(spec.unread_keys)}: check by hand that "
                   f"{'they change' if len(spec.unread_keys) > 1 else 'it changes'} nothing the gate measures (k, the "
                   "method, the draft or head, which batches speculate, how drafts are accepted)")
    if role == "server":
        off = disabled_sizes(preset, argv, batch_sizes)
        out += [off] if off else []
    return out


__all__ = ["Difference", "disabled_sizes", "line_notes", "pair_differences", "served", "starts_stack", "unreadable"]
