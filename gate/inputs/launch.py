"""What a serving stack's ``launch:`` line says about speculation: k and the draft, read off its flags.

The config gives k (``speculation.num_draft_tokens``) and the draft (``models.draft.path``); a ``launch:`` line
gives them again to the server.  When the two disagree the gate would label, judge and baseline one setting while
the server runs another, so the config is refused (docs/serving.md, "k and the draft, given twice").

Read per preset, from the stacks' documented flags (``--flag value`` and ``--flag=value``):

* ``vllm``: ``--speculative-config`` / ``--speculative_config`` / ``-sc`` JSON, keys ``num_speculative_tokens``
  and ``model``; the older ``--num-speculative-tokens`` and ``--speculative-model``;
* ``sglang``: ``--speculative-num-steps`` (draft steps per verification: k), or, without it and with
  ``--speculative-eagle-topk`` absent or 1, ``--speculative-num-draft-tokens`` minus 1 (SGLang verifies the
  k drafts plus the bonus position); the draft from ``--speculative-draft-model-path``;
* ``llamacpp``: ``--spec-draft-n-max``, or the older ``--draft-max`` / ``--draft-n`` / ``--draft``; the draft
  from ``-md`` / ``--model-draft``.

A flag that is not there leaves that value unknown (a stack's own default, a config file): nothing is refused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

_K_FLAGS = {
    "vllm": ("--num-speculative-tokens", "--num_speculative_tokens"),
    "sglang": ("--speculative-num-steps",),
    "llamacpp": ("--spec-draft-n-max", "--draft-max", "--draft-n", "--draft"),
}
_DRAFT_FLAGS = {
    "vllm": ("--speculative-model", "--speculative_model"),
    "sglang": ("--speculative-draft-model-path", "--speculative-draft-model"),
    "llamacpp": ("-md", "--model-draft"),
}
_VLLM_JSON = ("--speculative-config", "--speculative_config", "-sc")


@dataclass(frozen=True)
class LaunchSpeculation:
    """k and the draft as a launch line gives them (None: not given), and the flags they came from."""

    k: int | None = None
    k_flag: str | None = None
    draft: str | None = None
    draft_flag: str | None = None

    @property
    def speculates(self) -> bool:
        return self.draft is not None or bool(self.k)


def _flags(argv: list[str]) -> dict[str, str]:
    """Each ``--flag value`` or ``--flag=value`` of a command line, the last one winning (as argparse does)."""
    out: dict[str, str] = {}
    for i, arg in enumerate(argv):
        if not arg.startswith("-"):
            continue
        if "=" in arg and arg.startswith("--"):
            name, value = arg.split("=", 1)
            out[name] = value
        elif i + 1 < len(argv):
            out[arg] = argv[i + 1]
    return out


def _int(flag: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{flag} {value!r}: expected a whole number") from None


def read_launch(preset: str, argv: list[str]) -> LaunchSpeculation:
    """k and the draft from a launch line of ``preset``; a preset the gate cannot read gives nothing."""
    flags = _flags(argv)
    k = k_flag = draft = draft_flag = None
    for f in _K_FLAGS.get(preset, ()):
        if f in flags:
            k, k_flag = _int(f, flags[f]), f
            break
    for f in _DRAFT_FLAGS.get(preset, ()):
        if f in flags:
            draft, draft_flag = flags[f], f
            break
    if preset == "vllm":
        for f in _VLLM_JSON:
            if f not in flags:
                continue
            try:
                spec = json.loads(flags[f])
            except json.JSONDecodeError as e:
                raise ValueError(f"{f}: not JSON ({e.msg} at character {e.pos})") from None
            if not isinstance(spec, dict):
                raise ValueError(f"{f}: expected a JSON object, got {type(spec).__name__}")
            if "num_speculative_tokens" in spec:
                k, k_flag = _int(f"{f} num_speculative_tokens", str(spec["num_speculative_tokens"])), \
                    f"{f} num_speculative_tokens"
            if isinstance(spec.get("model"), str):
                draft, draft_flag = spec["model"], f"{f} model"
            break
    if preset == "sglang" and k is None and "--speculative-num-draft-tokens" in flags:
        topk = flags.get("--speculative-eagle-topk", "1")
        if topk == "1":
            k = _int("--speculative-num-draft-tokens", flags["--speculative-num-draft-tokens"]) - 1
            k_flag = "--speculative-num-draft-tokens (minus the bonus position)"
    return LaunchSpeculation(k, k_flag, draft, draft_flag)


def _hub_id(path: str) -> str | None:
    """``org/name`` as a hub id (lower case), or None for anything that reads as a local path or a file."""
    if path.startswith((".", "/", "~")) or ":" in path or path.endswith(".gguf") or path.count("/") != 1:
        return None
    return path.lower()


def mismatches(preset: str, argv: list[str], k: int, draft: str, role: str) -> list[str]:
    """What a launch line of ``role`` ("server": speculation on, "reference": off) contradicts in the config.

    k must equal ``speculation.num_draft_tokens``; the draft must be ``models.draft.path`` where both are hub ids
    (a local folder, a GGUF file or a server-side path cannot be compared by name, and is not); the reference's
    line must not speculate at all."""
    spec = read_launch(preset, argv)
    if role == "reference":
        if spec.speculates:
            given = spec.draft_flag if spec.draft is not None else spec.k_flag
            return [f"the reference's launch line speculates ({given}); the reference is the same stack with "
                    "speculation off: drop the draft flags there"]
        return []
    out = []
    if spec.k is not None and spec.k != k:
        out.append(f"k differs: {spec.k_flag} gives {spec.k}, speculation.num_draft_tokens gives {k}; the gate "
                   "would label and baseline one k while the server runs the other: make them equal")
    if spec.draft is not None and _hub_id(spec.draft) and _hub_id(draft) and _hub_id(spec.draft) != _hub_id(draft):
        out.append(f"the draft differs: {spec.draft_flag} gives {spec.draft!r}, models.draft.path gives {draft!r}; "
                   "make them name the same model")
    return out


__all__ = ["LaunchSpeculation", "mismatches", "read_launch"]
