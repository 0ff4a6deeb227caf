"""What a serving stack's ``launch:`` line says about speculation: k, the draft or head, read off its flags.

The config gives k (``speculation.num_draft_tokens``) and the draft (``models.draft.path``); a ``launch:`` line
gives them again to the server.  When the two disagree the gate would label, judge and baseline one setting while
the server runs another, so the config is refused (docs/serving.md, "k and the draft, given twice").

Read per preset, from the stacks' documented flags (``--flag value`` and ``--flag=value``):

* ``vllm``: ``--speculative-config`` / ``--speculative_config`` / ``-sc`` JSON, keys ``num_speculative_tokens``,
  ``method``, ``model`` (the draft, or for a head method the head), ``prompt_lookup_min`` / ``_max`` and
  ``disable_by_batch_size`` (any other key is named as unread), each also as a dotted flag of its own
  (``--speculative-config.num_speculative_tokens 6``, which wins over the JSON's key, as vLLM's parser merges
  them); ``--config FILE`` (YAML, its keys the flags' names: the command line wins over the file); the older
  ``--num-speculative-tokens``, ``--speculative-model`` and ``--speculative-disable-by-batch-size``;
* ``sglang``: ``--speculative-num-steps`` (draft steps per verification: k), or, without it and with
  ``--speculative-eagle-topk`` absent or 1, ``--speculative-num-draft-tokens`` minus 1 (SGLang verifies the
  k drafts plus the bonus position); the draft (an EAGLE algorithm's head) from ``--speculative-draft-model-path``;
* ``llamacpp``: ``--spec-draft-n-max``, or the older ``--draft-max`` / ``--draft-n`` / ``--draft``; the draft
  from ``-md`` / ``--model-draft``;
* ``tgi``: ``--speculate`` (k; Medusa heads come with the model, else n-gram lookup: no method on the line).

A flag that is not there leaves that value unknown (a stack's own default): nothing is refused.  A flag about
speculation that the gate does not read, or a ``--config`` file it cannot open, is named by :func:`unread`, which
``validate`` and ``plan`` print as a warning: never silence.  Each preset's flags are its table in
:mod:`gate.inputs.stack_flags`; the reference's line against the server's, and what the gate cannot read of a line,
are :mod:`gate.inputs.launch_checks`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from gate.inputs.stack_flags import STACKS

# Each preset's speculation flags, from its table (gate/inputs/stack_flags.py)
_K_FLAGS = {p: s.k for p, s in STACKS.items() if s.k}
_DRAFT_FLAGS = {p: s.draft for p, s in STACKS.items() if s.draft}
_VLLM_JSON = ("--speculative-config", "--speculative_config", "-sc")
_VLLM_DOTTED = ("--speculative-config.", "--speculative_config.")
# Flags about speculation each preset's reader knows and leaves alone on purpose (they change neither k, the method
# nor the draft), or reads elsewhere: not warned about.
_KNOWN = {p: s.known + s.disable_by_batch_size for p, s in STACKS.items() if s.known or s.disable_by_batch_size}
# What a flag about speculation looks like, per preset (to name one the gate does not read)
_ABOUT = {p: s.about for p, s in STACKS.items() if s.about}
# The keys of vLLM's --speculative-config the gate reads; any other is named by line_notes
SPEC_KEYS_READ = ("num_speculative_tokens", "method", "model", "prompt_lookup_min", "prompt_lookup_max",
                  "disable_by_batch_size")


Read = Callable[[str], "str | None"]  # a path as a launch line names it -> its text, or None
_FILES_FROM: ContextVar[Read | None] = ContextVar("launch_files_from", default=None)


def read_text(path: str) -> str | None:
    """A file a launch line names, read from the working tree (the server's own view of it), or inside
    :func:`files_from` by its reader; None where it cannot be read.  Every reader of launch files takes another as
    ``read`` (``specguard changed`` reads a commit's)."""
    other = _FILES_FROM.get()
    if other is not None:
        return other(path)
    try:
        return Path(path).expanduser().read_text()
    except (OSError, UnicodeDecodeError):
        return None


@contextmanager
def files_from(read: Read) -> Iterator[None]:
    """Inside the block the files launch lines name are read by ``read``: ``specguard changed`` validates each
    commit's config beside that commit's ``--config`` file, not the checkout's."""
    token = _FILES_FROM.set(read)
    try:
        yield
    finally:
        _FILES_FROM.reset(token)


@dataclass(frozen=True)
class LaunchSpeculation:
    """k and the draft as a launch line gives them (None: not given), and the flags they came from."""

    k: int | None = None
    k_flag: str | None = None
    draft: str | None = None
    draft_flag: str | None = None
    method: str | None = None  # the gate's name for it (gate.inputs.methods)
    method_flag: str | None = None
    lookup: tuple[int | None, int | None] = (None, None)  # n-gram lookup's prompt_lookup_min, prompt_lookup_max
    head: str | None = None  # an EAGLE/Medusa head's or an MTP module's path, for a method that has one
    head_flag: str | None = None
    disable_at: int | None = None  # speculation off while this many requests or more are running
    disable_flag: str | None = None
    spec_flag: str | None = None  # where vLLM's speculative config came from
    unread_keys: tuple[str, ...] = ()  # its keys the gate does not read

    @property
    def speculates(self) -> bool:
        return self.draft is not None or bool(self.k) or self.method is not None or self.head is not None


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


def launch_flags(argv: list[str]) -> dict[str, str]:
    """Each ``--flag value`` of a launch line (the last one winning): what other readers of a line use."""
    return _flags(argv)


def _int(flag: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{flag} {value!r}: expected a whole number") from None


def read_launch(preset: str, argv: list[str], read: Read = read_text) -> LaunchSpeculation:
    """k and the draft from a launch line of ``preset``; a preset the gate cannot read gives nothing.  ``read`` reads
    a ``--config`` file the line names (by default from the working tree)."""
    from gate.inputs.methods import METHODS, from_sglang, from_vllm

    flags = _flags(argv)
    k = k_flag = draft = draft_flag = method = method_flag = head = head_flag = None
    disable_at = disable_flag = spec_flag = None
    unread_keys: tuple[str, ...] = ()
    lookup: tuple[int | None, int | None] = (None, None)
    for f in STACKS[preset].disable_by_batch_size if preset in STACKS else ():
        if f in flags:
            disable_at, disable_flag = _int(f, flags[f]), f
    for f in _K_FLAGS.get(preset, ()):
        if f in flags:
            k, k_flag = _int(f, flags[f]), f
            break
    for f in _DRAFT_FLAGS.get(preset, ()):
        if f in flags:
            draft, draft_flag = flags[f], f
            break
    if preset == "vllm":
        file = vllm_file(flags, read)
        if k is None:
            for f in _K_FLAGS["vllm"]:
                if f[2:] in file:
                    k, k_flag = _int(f"--config {f[2:]}", str(file[f[2:]])), f"--config {flags['--config']} {f[2:]}"
                    break
        if draft is None:
            for f in _DRAFT_FLAGS["vllm"]:
                if isinstance(file.get(f[2:]), str):
                    draft, draft_flag = file[f[2:]], f"--config {flags['--config']} {f[2:]}"
                    break
        for f in STACKS["vllm"].disable_by_batch_size:
            if disable_at is None and f[2:].replace("_", "-") in file:
                disable_at = _int(f"--config {f[2:]}", str(file[f[2:].replace("_", "-")]))
                disable_flag = f"--config {flags['--config']} {f[2:]}"
        found = _vllm_spec(flags, argv, file)
        if found is not None:
            f, spec = found
            spec_flag, unread_keys = f, tuple(key for key in spec if key not in SPEC_KEYS_READ)
            if spec.get("disable_by_batch_size") is not None:
                disable_at = _int(f"{f} disable_by_batch_size", str(spec["disable_by_batch_size"]))
                disable_flag = f"{f} disable_by_batch_size"
            if "num_speculative_tokens" in spec:
                k, k_flag = _int(f"{f} num_speculative_tokens", str(spec["num_speculative_tokens"])), \
                    f"{f} num_speculative_tokens"
            if isinstance(spec.get("method"), str):
                method, method_flag = from_vllm(spec["method"]), f"{f} method"
            if isinstance(spec.get("model"), str) and method in (None, "draft_model"):
                draft, draft_flag = spec["model"], f"{f} model"  # without a method vLLM infers it from the model
            elif isinstance(spec.get("model"), str) and METHODS[method].head:
                head, head_flag = spec["model"], f"{f} model"
            lookup = tuple(_int(f"{f} {key}", str(spec[key])) if key in spec else None
                           for key in ("prompt_lookup_min", "prompt_lookup_max"))
    if preset == "sglang" and k is None and "--speculative-num-draft-tokens" in flags:
        topk = flags.get("--speculative-eagle-topk", "1")
        if topk == "1":
            k = _int("--speculative-num-draft-tokens", flags["--speculative-num-draft-tokens"]) - 1
            k_flag = "--speculative-num-draft-tokens (minus the bonus position)"
    if preset == "sglang" and "--speculative-algorithm" in flags:
        method, method_flag = from_sglang(flags["--speculative-algorithm"]), "--speculative-algorithm"
        if method != "draft_model":
            if draft is not None and METHODS[method].head:
                head, head_flag = draft, draft_flag  # an EAGLE head's path in --speculative-draft-model-path
            draft = draft_flag = None  # is no draft model
    if draft is not None and method is None and draft_flag in _DRAFT_FLAGS.get(preset, ()):
        method, method_flag = "draft_model", draft_flag  # a flag that names a draft model, and only that
    return LaunchSpeculation(k, k_flag, draft, draft_flag, method, method_flag, lookup, head, head_flag, disable_at,
                             disable_flag, spec_flag, unread_keys)


def _json_object(flag: str, value) -> dict:
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


def _value(text: str):
    """A dotted flag's value as vLLM's parser reads it: JSON where it parses, else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def vllm_file(flags: dict[str, str], read: Read = read_text) -> dict:
    """``--config FILE``'s keys (YAML), underscores as dashes; {} where there is none or it cannot be read (said by
    :func:`unread`, never refused: the server, not the gate, is the judge of its own file).  ``read`` reads the
    file (by default from the working tree)."""
    import yaml

    if "--config" not in flags:
        return {}
    text = read(flags["--config"])
    if text is None:
        return {}
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return {}
    return {str(k).replace("_", "-"): v for k, v in data.items()} if isinstance(data, dict) else {}


def _vllm_spec(flags: dict[str, str], argv: list[str], file: dict) -> tuple[str, dict] | None:
    """The speculative config as vLLM assembles it, (where it came from, keys), or None: the file's, then the
    command line's JSON over it, then its dotted keys over both."""
    where, spec = None, {}
    if "speculative-config" in file:
        where, spec = f"--config {flags['--config']} speculative-config", \
            dict(_json_object("--config speculative-config", file["speculative-config"]))
    for f in _VLLM_JSON:
        if f in flags:
            where, spec = f, _json_object(f, flags[f])
            break
    dotted = {}
    for i, arg in enumerate(argv):
        for prefix in _VLLM_DOTTED:
            if arg.startswith(prefix):
                key, eq, text = arg[len(prefix):].partition("=")
                if not eq and i + 1 < len(argv):
                    text = argv[i + 1]
                dotted[key.replace("-", "_")] = _value(text)
    if dotted:
        spec = {**spec, **dotted}
        where = where + " and its dotted flags" if where else "--speculative-config.*"
    return (where, spec) if where else None


def unread(preset: str | None, argv: list[str]) -> list[str]:
    """Flags of a launch line that are about speculation and that the gate does not read, and a ``--config`` file it
    cannot open: what ``validate`` and ``plan`` warn about (the config's k, method and draft are then unchecked
    against them)."""
    if preset not in _ABOUT:
        return []
    known = {*_K_FLAGS.get(preset, ()), *_DRAFT_FLAGS.get(preset, ()), *_KNOWN.get(preset, ()),
             *(_VLLM_JSON if preset == "vllm" else ())}
    out = []
    for arg in argv:
        name = arg.split("=", 1)[0] if arg.startswith("--") else arg
        if not name.startswith("-") or name in known or (preset == "vllm" and name.startswith(_VLLM_DOTTED)):
            continue
        if name.startswith(_ABOUT[preset]) and name not in out:
            out.append(name)
    said = [f"{name} is about speculation and the gate does not read it: check by hand that it agrees with the "
            "config's speculation section" for name in out]
    flags = _flags(argv)
    if preset == "vllm" and "--config" in flags and not vllm_file(flags):
        said.append(f"--config {flags['--config']}: cannot read it as YAML from here (the gate launches the server "
                    "in its own working directory): the speculation it sets is not checked against the config")
    return said


def hub_id(path: str) -> str | None:
    """``org/name`` as a hub id (lower case), or None for anything that reads as a local path or a file."""
    if path.startswith((".", "/", "~")) or ":" in path or path.endswith(".gguf") or path.count("/") != 1:
        return None
    return path.lower()


def mismatches(preset: str, argv: list[str], k: int, draft: str | None, role: str, method: str = "draft_model",
               lookup: tuple[int | None, int | None] = (None, None), head: str | None = None) -> list[str]:
    """What a launch line of ``role`` ("server": speculation on, "reference": off) contradicts in the config.

    k must equal ``speculation.num_draft_tokens``; the draft must be ``models.draft.path`` and the head
    ``speculation.head`` where both are hub ids (a local folder, a GGUF file or a server-side path cannot be compared
    by name, and is not); the reference's line must not speculate at all."""
    spec = read_launch(preset, argv)
    if role == "reference":
        if spec.speculates:
            given = next(f for f in (spec.draft_flag, spec.head_flag, spec.k_flag, spec.method_flag) if f)
            return [f"the reference's launch line speculates ({given}); the reference is the same stack with "
                    "speculation off: drop the draft flags there"]
        return []
    out = []
    if spec.method is not None and spec.method != method:
        if spec.method == "draft_model":
            fix = "set speculation.method: draft_model and models.draft to the server's draft"
        elif draft is not None:
            fix = (f"set speculation.method: {spec.method} and drop models.draft (the server proposes without it: a "
                   "draft-side test would measure a model that proposed nothing)")
        else:
            fix = f"set speculation.method: {spec.method}"
        out.append(f"the method differs: {spec.method_flag} gives {spec.method}, the config gives {method}; {fix}")
    if spec.k is not None and spec.k != k:
        out.append(f"k differs: {spec.k_flag} gives {spec.k}, speculation.num_draft_tokens gives {k}; the gate "
                   "would label and baseline one k while the server runs the other: make them equal")
    for name, ours, theirs in zip(("prompt_lookup_min", "prompt_lookup_max"), lookup, spec.lookup):
        if ours is not None and theirs is not None and ours != theirs:
            out.append(f"the n-gram lookup differs: the launch line's {name} is {theirs}, speculation.{name} is "
                       f"{ours}: make them equal (or drop the config's, which then reads the line's)")
    if spec.draft is not None and draft is not None and hub_id(spec.draft) and hub_id(draft) \
            and hub_id(spec.draft) != hub_id(draft):
        out.append(f"the draft differs: {spec.draft_flag} gives {spec.draft!r}, models.draft.path gives {draft!r}; "
                   "make them name the same model")
    if spec.head is not None and head is not None and hub_id(spec.head) and hub_id(head) \
            and hub_id(spec.head) != hub_id(head):
        out.append(f"the head differs: {spec.head_flag} gives {spec.head!r}, speculation.head gives {head!r}; the "
                   "change trigger, the fingerprint and the baseline would name one head while the server runs "
                   "another: make them name the same head")
    return out


# The share of a GPU's memory a server takes, by its flag, and the stack's default when the line gives none.
MEMORY_FLAGS = {p: s.memory for p, s in STACKS.items() if s.memory}
MEMORY_BUDGET = 0.95  # what servers sharing a GPU may claim together (the rest: CUDA context, the gate's own copy)


def memory_fraction(preset: str, argv: list[str]) -> tuple[float | None, bool]:
    """(the share of the GPU a ``vllm`` or ``sglang`` launch line claims, whether the line says it); (None, False)
    for a stack that claims no fixed share, and for a line that does not start the stack itself (a shell script,
    ``bash -c``: what it runs is not read, so no claim is made)."""
    if preset not in MEMORY_FLAGS or not any(preset in Path(a).name or a.startswith(f"{preset}.") for a in argv):
        return None, False
    flag, default = MEMORY_FLAGS[preset]
    value = _flags(argv).get(flag) or _flags(argv).get(flag.replace("-", "_").replace("__", "--"))
    try:
        return (float(value), True) if value is not None else (default, False)
    except ValueError:
        return default, False


# --- remote servers: their hardware is not the runner's ---------------------------------------------


def remote_servers(engines) -> list[tuple[str, str]]:
    """(field, url) of each server the gate does not launch and that is not on this machine (a loopback host): the
    timed work runs on hardware the runner cannot fingerprint, so the baseline's hardware key must be named."""
    from urllib.parse import urlsplit

    out = []
    for i, e in enumerate(engines):
        for where, ep in e.endpoints():
            host = (urlsplit(ep.url).hostname or "").lower()
            if ep.launch or host == "localhost" or host.startswith("127.") or host in ("::1", "0.0.0.0"):
                continue
            out.append((f"engines[{i}].{where}", ep.url))
    return out


# --- chunked prefill: the most prompt tokens one step takes, by each stack's flag ------------------

# (flags, the stack's default where it is fixed and documented; None: the stack picks one by hardware and version)
PREFILL_FLAGS = {p: s.prefill for p, s in STACKS.items() if s.prefill}


def prefill_chunk(preset: str, argv: list[str]) -> tuple[int | None, str | None]:
    """(the most prompt tokens a server prefills in one step, the flag that set it, or "default" for the stack's
    documented default); (None, None) where the line does not say and the default depends on the stack's version
    or hardware, or the preset is not read.  A longer prompt is prefilled in chunks over several steps: the path
    OpenVINO's split-prefill bug lived in."""
    if preset not in PREFILL_FLAGS:
        return None, None
    names, default = PREFILL_FLAGS[preset]
    flags = _flags(argv)
    for f in names:
        if f in flags:
            return _int(f, flags[f]), f
    return (default, "default") if default is not None else (None, None)


# --- ports: paired mode gives the base's launched server a port of its own -----------------------

PORT_PLACEHOLDER = "{port}"  # in a launch line: the port of the endpoint's url, filled in at launch
_PORT_FLAGS = ("--port", "-p")


def url_port(url: str) -> int:
    """The port a url names (its scheme's default when it names none)."""
    from urllib.parse import urlsplit

    u = urlsplit(url)
    return u.port or (443 if u.scheme == "https" else 80)


def with_port(url: str, port: int) -> str:
    """``url`` on another port (same scheme, host and path)."""
    from urllib.parse import urlsplit, urlunsplit

    u = urlsplit(url)
    host = f"[{u.hostname}]" if u.hostname and ":" in u.hostname else (u.hostname or "")
    return urlunsplit((u.scheme, f"{host}:{port}", u.path, u.query, u.fragment))


def fill_port(argv: list[str], url: str) -> list[str]:
    """The launch line with ``{port}`` replaced by the url's port."""
    port = str(url_port(url))
    return [a.replace(PORT_PLACEHOLDER, port) for a in argv]


def moved_launch(argv: list[str], old: int, new: int) -> list[str] | None:
    """The launch line serving on ``new`` instead of ``old``: ``{port}`` stays (it follows the url), ``--port N`` /
    ``--port=N`` / ``-p N`` with N = ``old`` is rewritten; None when the line names its port neither way (the gate
    cannot move a server whose port it cannot see)."""
    if any(PORT_PLACEHOLDER in a for a in argv):
        return list(argv)
    out, moved = list(argv), False
    for i, a in enumerate(out):
        if a in _PORT_FLAGS and i + 1 < len(out) and out[i + 1] == str(old):
            out[i + 1], moved = str(new), True
        elif any(a == f"{f}={old}" for f in _PORT_FLAGS):
            out[i], moved = f"{a.split('=', 1)[0]}={new}", True
    return out if moved else None


def without_port(argv: list[str]) -> list[str]:
    """The launch line with its port written as ``{port}`` (a baseline's record: a free port is no change)."""
    out = list(argv)
    for i, a in enumerate(out):
        if a in _PORT_FLAGS and i + 1 < len(out):
            out[i + 1] = PORT_PLACEHOLDER
        elif "=" in a and a.split("=", 1)[0] in _PORT_FLAGS:
            out[i] = f"{a.split('=', 1)[0]}={PORT_PLACEHOLDER}"
    return out


__all__ = ["MEMORY_BUDGET", "MEMORY_FLAGS", "PORT_PLACEHOLDER", "SPEC_KEYS_READ", "LaunchSpeculation", "Read",
           "files_from", "fill_port", "hub_id", "memory_fraction", "mismatches", "moved_launch", "read_launch",
           "read_text", "url_port", "vllm_file", "with_port", "without_port"]
