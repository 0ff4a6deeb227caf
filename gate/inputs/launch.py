"""What a serving stack's ``launch:`` line says about speculation: k, the draft or head, read off its flags.

The config gives k (``speculation.num_draft_tokens``) and the draft (``models.draft.path``); a ``launch:`` line
gives them again to the server.  When the two disagree the gate would label, judge and baseline one setting while
the server runs another, so the config is refused (docs/serving.md, "k and the draft, given twice").

Each stack reads its own lines (gate/stacks/: ``vllm``'s ``--speculative-config`` in JSON, dotted and ``--config``
file forms, ``sglang``'s ``--speculative-num-steps`` or ``--speculative-num-draft-tokens``, ``llamacpp``'s
``--spec-draft-n-max``, ``tgi``'s ``--speculate``, ``trtllm``'s options file); this module compares what they read
with the config.

A flag that is not there leaves that value unknown (a stack's own default): nothing is refused.  A flag about
speculation that the gate does not read, or a ``--config`` file it cannot open, is named by :func:`unread`, which
``validate`` and ``plan`` print as a warning: never silence.  Each preset's flags are its stack's table
(:mod:`gate.stacks`); the reference's line against the server's, and what the gate cannot read of a line,
are :mod:`gate.inputs.launch_checks`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from gate.stacks import find
from gate.stacks.base import Read, flags_of, whole

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
    spec_flag: str | None = None  # where a speculative config (vLLM's) came from
    unread_keys: tuple[str, ...] = ()  # its keys the gate does not read

    @property
    def speculates(self) -> bool:
        return self.draft is not None or bool(self.k) or self.method is not None or self.head is not None


def launch_flags(argv: list[str]) -> dict[str, str]:
    """Each ``--flag value`` of a launch line (the last one winning): what other readers of a line use."""
    return flags_of(argv)


def read_launch(preset: str, argv: list[str], read: Read = read_text) -> LaunchSpeculation:
    """k and the draft or head from a launch line of ``preset`` (its stack's :meth:`~gate.stacks.base.Stack.
    speculation`); a preset whose lines the gate does not read gives nothing.  ``read`` reads a file of flags the
    line names (by default from the working tree).  The path the line proposes with is the draft for method
    ``draft_model`` (or none named), the head for a method with one, and nothing for a method without either."""
    from gate.inputs.methods import METHODS

    stack = find(preset)
    if stack is None or not stack.reads_launch:
        return LaunchSpeculation()
    f = stack.speculation(argv, read)
    draft, draft_flag, method, method_flag, head, head_flag = f.draft, f.draft_flag, f.method, f.method_flag, None, None
    if method is not None and method != "draft_model":
        if draft is not None and METHODS[method].head:
            head, head_flag = draft, draft_flag
        draft = draft_flag = None
    elif draft is not None and method is None and draft_flag in stack.draft:
        method, method_flag = "draft_model", draft_flag  # a flag that names a draft model, and only that
    return LaunchSpeculation(f.k, f.k_flag, draft, draft_flag, method, method_flag, f.lookup, head, head_flag,
                             f.disable_at, f.disable_flag, f.spec_flag, f.unread_keys)


def unread(preset: str | None, argv: list[str]) -> list[str]:
    """Flags of a launch line that are about speculation and that the gate does not read, and a file of flags it
    cannot open: what ``validate`` and ``plan`` warn about (the config's k, method and draft are then unchecked
    against them)."""
    stack = find(preset)
    if stack is None:
        return []
    out = []
    for arg in argv if stack.about else ():
        name = arg.split("=", 1)[0] if arg.startswith("--") else arg
        if not name.startswith("-") or stack.knows(name):
            continue
        if name.startswith(stack.about) and name not in out:
            out.append(name)
    said = [f"{name} is about speculation and the gate does not read it: check by hand that it agrees with the "
            "config's speculation section" for name in out]
    note = stack.file_note(flags_of(argv), read_text)
    return said + ([note] if note else [])


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


MEMORY_BUDGET = 0.95  # what servers sharing a GPU may claim together (the rest: CUDA context, the gate's own copy)


def memory_fraction(preset: str, argv: list[str]) -> tuple[float | None, bool]:
    """(the share of the GPU a launch line claims by its stack's memory flag, whether the line says it); (None,
    False) for a stack that claims no fixed share, and for a line that does not start the stack itself (a shell
    script, ``bash -c``: what it runs is not read, so no claim is made)."""
    stack = find(preset)
    if stack is None or stack.memory is None or not stack.starts(argv):
        return None, False
    flag, default = stack.memory
    flags = flags_of(argv)
    value = flags.get(flag) or flags.get(flag.replace("-", "_").replace("__", "--"))
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

def prefill_chunk(preset: str, argv: list[str]) -> tuple[int | None, str | None]:
    """(the most prompt tokens a server prefills in one step, the flag that set it, or "default" for the stack's
    documented default); (None, None) where the line does not say and the default depends on the stack's version
    or hardware, or the preset is not read.  A longer prompt is prefilled in chunks over several steps: the path
    OpenVINO's split-prefill bug lived in."""
    stack = find(preset)
    if stack is None or stack.prefill is None:
        return None, None
    names, default = stack.prefill
    flags = flags_of(argv)
    for f in names:
        if f in flags:
            return whole(f, flags[f]), f
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


__all__ = ["MEMORY_BUDGET", "PORT_PLACEHOLDER", "LaunchSpeculation", "Read", "files_from",
           "fill_port", "hub_id", "launch_flags", "memory_fraction", "mismatches", "moved_launch", "prefill_chunk",
           "read_launch", "read_text", "unread", "url_port", "with_port", "without_port"]
