"""What a serving stack is to the gate: one :class:`Stack` per stack (a module of its own under ``gate/stacks/``).

A stack owns everything the gate knows of it, and nothing else in the package branches on its name:

* **its launch line** (:mod:`gate.inputs.launch`, :mod:`gate.inputs.launch_checks`, :mod:`gate.inputs.launch_diff`):
  how a line starts it (``programs``, ``modules``), its serving settings flag by flag (``settings``: the names of
  :data:`SETTINGS`, which the reference's line must share with the server's), its speculation flags (k, the draft or
  head, the method, the n-gram lookup, what turns speculation off by load) read by :meth:`Stack.speculation`, the
  flags it reads elsewhere or leaves alone on purpose (``known``) and what a flag about speculation looks like
  (``about``, to name one the gate does not read), its memory share and prefill chunk, the flag that turns its
  prefix cache off, the files a line makes it load (``files``: ``specguard changed`` follows them), and a
  ``--config``-style file of flags where it reads one (:meth:`Stack.config_file`);
* **its wire format** (:mod:`gate.engines.http`): the fields a request adds (``engine_request``,
  ``reference_request``), how a streamed event reads (:meth:`Stack.parse`), its route, whether it gives token ids,
  its Prometheus counters;
* **its method names** (``methods``: the stack's name for a speculation method -> the gate's, gate/inputs/methods.py);
* **its truncation order** (``truncation``: the order it applies top_k/top_p/min_p after the temperature, which
  ``generation.sampling.truncation_order`` may name), or why the gate does not model it (``no_truncation``);
* **what it can score** (``no_scoring``: why its reference cannot score a given continuation, None where it can) and
  whether its chat route gives the ids the gate reads (``chat``).

Flags come from each stack's documentation and ``--help``; a flag's first name is the stack's own spelling, the rest
its aliases; its default is the stack's documented one where that is fixed, and None where the stack picks by
version, hardware or model (then a line that sets it and a line that does not are not known to agree).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

Read = Callable[[str], "str | None"]  # a path as a launch line names it -> its text, or None


# --- the launch line -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Flag:
    """One flag of a launch line: its names, the stack's default, and whether it is a switch (no value)."""

    names: tuple[str, ...]
    default: str | None = None  # None: the stack picks (version, hardware, the model's own config)
    switch: bool = False  # present means "true"
    off: tuple[str, ...] = ()  # a switch's negations (vLLM's --no-enable-prefix-caching): present means "false"


@dataclass(frozen=True)
class Setting:
    """A serving setting the reference must share with the server, as the gate names it in every stack."""

    doc: str
    distorts: str  # what a difference would distort: said in the refusal or warning
    refused: bool = True  # False: a difference is a warning (validate, plan), not exit 2


# The settings compared between a server's line and its reference's (the names http.allow_differences takes)
SETTINGS: dict[str, Setting] = {
    "model": Setting("the served model (a path or a hub id)",
                     "the reference would serve another model: equivalence, the noise floor and the speedup would "
                     "compare two models"),
    "tensor_parallel": Setting("tensor parallelism (llama.cpp: how the model is split over GPUs)",
                               "another split changes a step's cost (the speedup) and the reduction order (the noise "
                               "floor, and divergences the gate would blame on speculation)"),
    "pipeline_parallel": Setting("pipeline parallelism",
                                 "another split changes a step's cost (the speedup) and the reduction order (the "
                                 "noise floor)"),
    "dtype": Setting("the weights' and activations' dtype",
                     "other arithmetic: its divergences read as speculation's (equivalence), and the noise floor and "
                     "the speedup would measure two stacks"),
    "quantization": Setting("the weights' quantization",
                            "other arithmetic: its divergences read as speculation's (equivalence), and the noise "
                            "floor and the speedup would measure two stacks"),
    "kv_cache_dtype": Setting("the KV cache's dtype",
                              "other arithmetic in attention: its divergences read as speculation's (equivalence), "
                              "and the noise floor would measure two stacks"),
    "max_model_len": Setting("the longest sequence (prompt and output)",
                             "a prompt that fits one side and not the other fails on one side only, and the KV "
                             "cache is laid out for another length (the speedup at high load)", refused=False),
    "batch_budget": Setting("the tokens one scheduler step takes",
                            "the scheduler batches differently at the same load: the speedup would compare two "
                            "schedulers, and other batch shapes change the reduction order (the noise floor)"),
    "max_seqs": Setting("the most sequences in flight",
                        "one side queues requests the other runs: the speedup would compare two load levels"),
    "chunked_prefill": Setting("chunked prefill and its chunk",
                               "prompts are prefilled in other chunks: other kernels and reduction order (the noise "
                               "floor), another prefill cost (the speedup)"),
    "prefix_caching": Setting("the prefix cache",
                              "one side serves repeated prefixes from its cache: the speedup is flattered or "
                              "deflated"),
    "eager": Setting("eager mode against CUDA graphs (or compilation)",
                     "a step costs differently with graphs (the speedup), and other kernels may round differently "
                     "(the noise floor)"),
    "attention": Setting("the attention backend (llama.cpp: flash attention)",
                         "other attention kernels round differently (the noise floor) and cost differently (the "
                         "speedup)"),
    "memory": Setting("the share of GPU memory it takes",
                      "the KV cache differs in size: at high load one side preempts or queues where the other does "
                      "not (the speedup); the server's draft or head takes its memory from the same share",
                      refused=False),
    "gpu_layers": Setting("the layers offloaded to the GPU",
                          "layers left on the CPU on one side only: the speedup would measure offloading"),
}


@dataclass
class Found:
    """What a launch line says about speculation, as its stack reads it (None: not said), with the flags it came
    from.  ``draft`` is the path the line proposes with: a draft model's, or, where ``method`` has a head, the
    head's (:func:`gate.inputs.launch.read_launch` tells them apart)."""

    k: int | None = None
    k_flag: str | None = None
    draft: str | None = None
    draft_flag: str | None = None
    method: str | None = None  # the gate's name (gate.inputs.methods), from the stack's own by Stack.methods
    method_flag: str | None = None
    lookup: tuple[int | None, int | None] = (None, None)  # n-gram lookup's shortest and longest match
    disable_at: int | None = None  # speculation off while this many requests or more are running
    disable_flag: str | None = None
    spec_flag: str | None = None  # where a speculative config (JSON, YAML) came from
    unread_keys: tuple[str, ...] = ()  # its keys the gate does not read


def flags_of(argv: list[str]) -> dict[str, str]:
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


def whole(flag: str, value) -> int:
    """A flag's value as a whole number, or a ValueError naming the flag."""
    try:
        return int(str(value))
    except ValueError:
        raise ValueError(f"{flag} {value!r}: expected a whole number") from None


def json_object(flag: str, value) -> dict:
    """A flag's JSON object (or a YAML file's mapping, given as one), or a ValueError naming the flag."""
    if isinstance(value, dict):
        return value
    try:
        spec = json.loads(value)
    except (TypeError, json.JSONDecodeError) as e:
        where = f" ({e.msg} at character {e.pos})" if isinstance(e, json.JSONDecodeError) else ""
        raise ValueError(f"{flag}: not JSON{where}") from None
    if not isinstance(spec, dict):
        raise ValueError(f"{flag}: expected a JSON object, got {type(spec).__name__}")
    return spec


def yaml_flags(path: str, read: Read) -> dict | None:
    """A YAML file of flags (their names without dashes, underscores read as dashes); None where it cannot be read or
    is not a mapping (said by the caller, never refused: the server, not the gate, is the judge of its own file)."""
    import yaml

    text = read(path)
    if text is None:
        return None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    return {str(k).replace("_", "-"): v for k, v in data.items()} if isinstance(data, dict) else None


# --- the wire ------------------------------------------------------------------------------------------


@dataclass
class Chunk:
    """What one streamed event carries: token ids (None: the stack gives none), per-token top-k logprobs
    keyed by token id (None: not offered), text, and per-request counters (llama.cpp's timings)."""

    ids: list[int] | None
    tops: list[dict[int, float]] | None
    text: str
    counters: dict[str, int] | None = None
    finish: str | None = None  # "stop" (EOS or a stop string) or "length"; None while streaming
    done: bool = False  # the stream's last event (a route without "[DONE]")
    generated: int | None = None  # tokens the server says it generated so far (llama-server's tokens_predicted)
    # no ids: each token's text and the top-k keyed by text, as OpenAI's legacy logprobs give them
    texts: list[str] | None = None
    top_texts: list[dict[str, float]] | None = None
    prompt_ids: list[int] | None = None  # the chat route's first event: the prompt the server rendered


def as_id(t) -> int | None:
    """A token id as a stack writes it: an int, or vLLM's ``"token_id:<n>"``; None for anything else."""
    if isinstance(t, int) and not isinstance(t, bool):
        return t
    if isinstance(t, str) and t.startswith("token_id:") and t[9:].isdigit():
        return int(t[9:])
    return None


def first_choice(event: dict) -> dict:
    """The event's first choice; {} for a chunk that carries none: the final usage chunk (``"choices": []``)
    that vLLM sends with ``--enable-force-include-usage`` or ``stream_options.include_usage``, SGLang with
    ``include_usage``, llama-server on its chat route.  A chunk without a ``choices`` list is malformed."""
    choices = event["choices"]
    if not isinstance(choices, list):
        raise TypeError("choices is not a list")
    return choices[0] if choices else {}


def parse_openai(event: dict) -> Chunk:
    """The OpenAI legacy completions shape: ``choices[0].token_ids`` when the stack returns them, else
    ``logprobs.tokens`` as "token_id:<n>" (vLLM's ``return_tokens_as_token_ids``); top-k keyed likewise; with
    neither, each token's text and the top-k keyed by text."""
    choice = first_choice(event)
    lp = choice.get("logprobs") or {}
    ids = choice.get("token_ids")
    if not (isinstance(ids, list) and all(as_id(t) is not None for t in ids)):
        ids = [as_id(t) for t in (lp.get("tokens") or [])]
        ids = ids if ids and all(t is not None for t in ids) else None
    tops = None
    if lp.get("top_logprobs") is not None:
        tops = [{as_id(k): float(v) for k, v in (d or {}).items() if as_id(k) is not None}
                for d in lp["top_logprobs"]]
    texts = top_texts = None
    pieces = lp.get("tokens")
    if ids is None and isinstance(pieces, list) and all(isinstance(t, str) for t in pieces):
        texts = list(pieces)
        raw = lp.get("top_logprobs")
        if isinstance(raw, list) and len(raw) == len(pieces) and all(isinstance(d, dict) for d in raw):
            top_texts = [{str(k): float(v) for k, v in d.items() if isinstance(v, (int, float))} for d in raw]
    return Chunk([int(t) for t in ids] if ids is not None else None, tops, choice.get("text") or "",
                 finish=choice.get("finish_reason"), texts=texts, top_texts=top_texts)


def parse_text(event: dict) -> Chunk:
    """A stack that gives only text on its OpenAI route (TGI): the gate compares text, and says so."""
    return Chunk(None, None, first_choice(event).get("text") or "")


# --- a stack ----------------------------------------------------------------------------------------

# The order transformers' generate() builds its warpers in: the in-process engines' truncation order
IN_PROCESS_ORDER = ("top_k", "top_p", "min_p")


class Stack:
    """One serving stack (override what the stack has; the defaults are "it has none")."""

    name: ClassVar[str]  # the preset's name in a config (engines[].http.preset)
    title: ClassVar[str] = ""  # how the docs and messages call it ("vLLM")
    shown: ClassVar[str] = ""  # how a launch line starts it, said when a line does not

    # the launch line (gate/inputs/launch*.py)
    programs: ClassVar[tuple[str, ...]] = ()  # an executable's name (its last path part), e.g. `vllm`
    modules: ClassVar[tuple[str, ...]] = ()  # a word that starts with one of these starts it (`python -m vllm.…`)
    settings: ClassVar[dict[str, tuple[Flag, ...]]] = {}  # SETTINGS name -> its flags on this stack
    k: ClassVar[tuple[str, ...]] = ()  # draft tokens per step
    draft: ClassVar[tuple[str, ...]] = ()  # the draft model's (or, for a head method, the head's) path
    known: ClassVar[tuple[str, ...]] = ()  # flags about speculation read elsewhere, or left alone on purpose
    about: ClassVar[tuple[str, ...]] = ()  # what a flag about speculation starts with (to name an unread one)
    disable_by_batch_size: ClassVar[tuple[str, ...]] = ()  # speculation off at this many running requests and above
    positional_model_after: ClassVar[str | None] = None  # `vllm serve MODEL`
    memory: ClassVar[tuple[str, float] | None] = None  # the flag giving a GPU memory share, the default share
    prefill: ClassVar[tuple[tuple[str, ...], int | None] | None] = None  # the prefill chunk's flags, its default
    prefix_cache_off: ClassVar[str | None] = None  # the flag that turns the prefix cache off
    config_flags: ClassVar[tuple[str, ...]] = ()  # `--config FILE` holds flags (YAML, names without dashes)
    file_wins: ClassVar[bool] = False  # that file's value wins over the command line's (else the line wins)
    files: ClassVar[tuple[str, ...]] = ()  # flags naming a file or folder the server loads (`specguard changed`)

    # the wire (gate/engines/http.py)
    engine_request: ClassVar[dict] = {}  # fields added to every request to the engine under test
    reference_request: ClassVar[dict] = {}  # ... and to the reference (top-k logprobs asked of the reference only)
    counters: ClassVar[dict[str, str]] = {}  # SpecCounters field -> Prometheus metric family
    per_pos: ClassVar[str | None] = None  # the per-position accepted-tokens family (label "position")
    prompt_as_text: ClassVar[bool] = False  # the route takes no token ids: send the decoded prompt
    route: ClassVar[str] = "/v1/completions"
    # Token ids ride on logprobs (vLLM's logprobs.tokens): the reference always asks for at least this many,
    # whatever http.logprobs says.  None: ids do not depend on them.
    min_logprobs: ClassVar[int | None] = None
    gives_ids: ClassVar[bool] = True  # False: the stack answers with text only; the gate compares text, says so

    # speculation methods: the stack's name for one -> the gate's (gate/inputs/methods.py)
    methods: ClassVar[dict[str, str]] = {}
    # sampling: the order it truncates in after the temperature (None: not modelled, and why)
    truncation: ClassVar[tuple[str, ...] | None] = None
    no_truncation: ClassVar[str] = "not documented"
    # scoring a given continuation on its reference (None: it can), and its chat route's ids
    no_scoring: ClassVar[str | None] = None
    chat: ClassVar[bool] = False

    # --- the wire ---

    def parse(self, event: dict) -> Chunk:
        """One streamed event of its completions route."""
        return parse_openai(event)

    # --- the launch line ---

    @property
    def reads_launch(self) -> bool:
        """Whether the gate reads this stack's launch lines at all."""
        return bool(self.programs or self.modules)

    def starts(self, argv: list[str]) -> bool:
        """Whether a launch line starts this stack's server itself (its program or module is one of its words), so
        that its flags are the stack's: a wrapper (``bash -c '…'``, a script) hides them."""
        return self.reads_launch and any(
            not any(c.isspace() for c in w) and (Path(w).name in self.programs or w.startswith(self.modules))
            for w in argv)

    def method_of(self, name: str) -> str:
        """The stack's name for a method as the gate's (``other`` for one the gate does not know)."""
        return self.methods.get(name, "other")

    def config_path(self, flags: dict[str, str]) -> tuple[str, str] | None:
        """(the flag, the path) of the line's file of flags (``config_flags``), or None: it names none."""
        return next(((f, flags[f]) for f in self.config_flags if f in flags), None)

    def config_file(self, flags: dict[str, str], read: Read) -> dict:
        """The flags the line's file of flags gives (YAML keys, underscores as dashes); {} where there is none or it
        cannot be read (:meth:`file_note` says so)."""
        at = self.config_path(flags)
        return (yaml_flags(at[1], read) or {}) if at else {}

    def file_note(self, flags: dict[str, str], read: Read) -> str | None:
        """Why the gate could not read the line's file of flags (a warning), or None."""
        at = self.config_path(flags)
        if at is None or yaml_flags(at[1], read):
            return None
        return (f"{at[0]} {at[1]}: cannot read it as YAML from here (the gate launches the server in its own working "
                "directory): the speculation it sets is not checked against the config")

    def positional_model(self, argv: list[str]) -> tuple[str, str] | None:
        """(the model a line names without a flag, how it was named): the word after ``positional_model_after``
        (``vllm serve MODEL``); None where there is none."""
        after = self.positional_model_after
        if after is None or after not in argv:
            return None
        rest = argv[argv.index(after) + 1:]
        return (rest[0], f"{self.name} {after}") if rest and not rest[0].startswith("-") else None

    def knows(self, name: str) -> bool:
        """Whether a flag about speculation is read by :meth:`speculation`, or left alone on purpose."""
        return name in self.k or name in self.draft or name in self.known or name in self.disable_by_batch_size

    def speculation(self, argv: list[str], read: Read) -> Found:
        """What a launch line says about speculation: k, the draft (or head) path, the method, the lookup lengths
        and what turns speculation off, from the stack's flags (a stack with more to read extends this)."""
        flags, found = flags_of(argv), Found()
        for f in self.disable_by_batch_size:
            if f in flags:
                found.disable_at, found.disable_flag = whole(f, flags[f]), f
        for f in self.k:
            if f in flags:
                found.k, found.k_flag = whole(f, flags[f]), f
                break
        for f in self.draft:
            if f in flags:
                found.draft, found.draft_flag = flags[f], f
                break
        return found

    def __repr__(self) -> str:
        return f"<stack {self.name}>"


# --- the registry (gate/stacks/__init__.py loads the built-in stacks) ------------------------------------

_STACKS: dict[str, Stack] = {}


def register(stack: Stack) -> Stack:
    """Make ``engines[].http.preset: <stack.name>`` validate and run with ``stack``."""
    if not getattr(type(stack), "name", None):
        raise TypeError(f"{type(stack).__name__}: a stack needs a name")
    _STACKS[stack.name] = stack
    return stack


def find(name: str | None) -> Stack | None:
    """The stack registered as ``name``; None for none."""
    return _STACKS.get(name or "")


def get(name: str) -> Stack:
    """The stack registered as ``name`` (a preset the config validated); KeyError naming the known ones."""
    try:
        return _STACKS[name]
    except KeyError:
        raise KeyError(f"no serving stack {name!r} (known: {', '.join(names())})") from None


def names() -> list[str]:
    """Every registered stack's name, in registration order (the built-in ones first)."""
    return list(_STACKS)


def stacks() -> list[Stack]:
    return list(_STACKS.values())


def orders() -> dict[str, tuple[str, ...]]:
    """Every truncation order the gate models (``generation.sampling.truncation_order``): each stack's that has one,
    and ``transformers`` (the in-process engines': generate()'s warpers)."""
    return {**{s.name: s.truncation for s in _STACKS.values() if s.truncation}, "transformers": IN_PROCESS_ORDER}


__all__ = ["IN_PROCESS_ORDER", "SETTINGS", "Chunk", "Flag", "Found", "Read", "Setting", "Stack", "as_id", "find",
           "first_choice", "flags_of", "get", "json_object", "names", "orders", "parse_openai", "parse_text",
           "register", "stacks", "whole", "yaml_flags"]
