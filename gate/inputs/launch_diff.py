"""What moved between two versions of what the gate reads, field by field: the words of ``specguard changed``.

A launch line is compared flag by flag (``--max-num-batched-tokens 2048 → 4096``, ``--enforce-eager unset → set``):
order and ``--flag value`` against ``--flag=value`` are no change, a JSON value (``--speculative-config``) is
compared key by key, and a shell line (``bash -c '…'``) by the flags inside it.  A YAML or JSON file (vLLM's
``--config`` file, a model's ``config.json``, the config itself) is compared key by key (``max-num-batched-tokens
2048 → 4096``, ``revision unset → v2``): a comment or a reformatting is no change.  :func:`loaded_files` names the
files and folders a launch line makes its server load (its stack's ``files`` flags in
:mod:`gate.stacks`, those flags inside a ``--config`` file, the draft, the head, the served model),
read through ``read`` so that a git revision can stand in for the working tree.

Everything here is text from a pull request: :func:`inert` makes each line printable and bounded (no control
characters, no second line, at most ``LINE_CAP`` characters), and nothing is ever run.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath

from gate.inputs.launch import Read, launch_flags, read_launch, read_text
from gate.inputs.launch_checks import is_flag, served, starts_stack
from gate.stacks import find

LINE_CAP = 600  # characters of one printed line
VALUE_CAP = 200  # characters of one value in it, so that a line shows both sides
MAX_PARSED = 1 << 20  # a YAML or JSON file larger than this is compared as a whole, not key by key
MAX_DEPTH = 32  # deeper than this, a value is compared as a whole
STRUCTURED = (".yaml", ".yml", ".json")
_SHELLS = ("bash", "sh", "zsh", "dash", "ksh")


class _Unset:
    def __repr__(self) -> str:
        return "unset"


UNSET = _Unset()  # a key or flag one side does not have


def inert(text: str, cap: int = LINE_CAP) -> str:
    """One line of untrusted text, safe to print in a CI log: any whitespace (a newline too) is a space, other
    control and format characters (an ANSI escape's ESC, a bidi override, a zero-width space) are dropped, and the
    line is cut to ``cap`` characters."""
    out = "".join(" " if ch.isspace() else ch for ch in text if ch.isprintable() or ch.isspace())
    return out if len(out) <= cap else out[: cap - 1] + "…"


def shown(value) -> str:
    """A value as a change line shows it: ``unset``, ``true``, ``4``, a string bare (quoted where it is empty or
    has spaces at its ends), a list or mapping as compact JSON; cut to ``VALUE_CAP``."""
    if value is UNSET or value is None:
        text = "unset"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = value if value and value == value.strip() else json.dumps(value, ensure_ascii=False)
    elif isinstance(value, (int, float)):
        text = str(value)
    else:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return inert(text, VALUE_CAP)


@dataclass(frozen=True)
class Moved:
    """One change: where (a config field, a launch line's field, a file), what in it (a flag, a key), both sides."""

    where: str
    what: str
    before: str
    after: str

    def line(self) -> str:
        return inert(f"{self.where}: {self.what + ' ' if self.what else ''}{self.before} → {self.after}")


def _same(a, b) -> bool:
    if (a is None or a is UNSET) and (b is None or b is UNSET):
        return True  # `key: null` and no key read alike
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def _key(prefix: str, key) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


def field_changes(a, b, key: str = "", depth: int = 0) -> list[tuple[str, object, object]]:
    """(dotted key, before, after) of each leaf that differs between two YAML/JSON documents: mappings key by key,
    lists of mappings item by item (``engines[0]``), anything else as one value; ``UNSET`` for a side without it."""
    if depth < MAX_DEPTH and isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in dict.fromkeys([*b, *a]):
            out += field_changes(a.get(k, UNSET), b.get(k, UNSET), _key(key, k), depth + 1)
        return out
    if depth < MAX_DEPTH and isinstance(a, list) and isinstance(b, list) and \
            any(isinstance(x, dict) for x in (*a, *b)):
        out = []
        for i in range(max(len(a), len(b))):
            out += field_changes(a[i] if i < len(a) else UNSET, b[i] if i < len(b) else UNSET, f"{key}[{i}]",
                                 depth + 1)
        return out
    return [] if _same(a, b) else [(key, a, b)]


# --- launch lines ------------------------------------------------------------------------------------------------


def _words(argv: list[str]) -> tuple[list[str], dict[str, list[str | None]], dict[str, str]]:
    """(the words that are no flag's, each flag's values in order (None: a switch), each flag's spelling)."""
    positional: list[str] = []
    flags: dict[str, list[str | None]] = {}
    spelled: dict[str, str] = {}
    i = 0
    while i < len(argv):
        word = argv[i]
        if not is_flag(word):
            positional.append(word)
            i += 1
            continue
        name, eq, value = word.partition("=") if word.startswith("--") else (word, "", "")
        if not eq:
            if i + 1 < len(argv) and not is_flag(argv[i + 1]):
                value = argv[i + 1]
                i += 1
            else:
                value = None
        key = name.replace("_", "-") if name.startswith("--") else name  # vLLM takes both spellings
        flags.setdefault(key, []).append(value)
        spelled[key] = name
        i += 1
    return positional, flags, spelled


def _json_object(text: str | None) -> dict | None:
    if not text or not text.lstrip().startswith("{"):
        return None
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _command(text: str | None) -> list[str] | None:
    """A value that is itself a command line with flags (``bash -c '…'``'s), as words; else None."""
    if not text or not any(c.isspace() for c in text):
        return None
    try:
        words = shlex.split(text)
    except ValueError:
        return None
    return words if len(words) > 1 and any(is_flag(w) for w in words) else None


def _flag_value(values: list[str | None] | None):
    if values is None:
        return UNSET
    texts = ["set" if v is None else v for v in values]
    return texts[0] if len(texts) == 1 else ", ".join(texts)


def flag_changes(before: list[str] | None, after: list[str] | None, depth: int = 0) -> list[tuple[str, str, str]]:
    """(flag, before, after) of each flag that differs between two launch lines (None: no line): a repeated flag by
    all its values in order, a JSON object value key by key, a shell line's (``-c``) by its own flags; the words
    that are no flag's (``vllm serve MODEL``) as ``argument N``."""
    pa, fa, spelled_before = _words(before or [])
    pb, fb, spelled = _words(after or [])
    out: list[tuple[str, str, str]] = []
    if pa != pb:
        if len(pa) == len(pb):
            out += [(f"argument {i + 1}", shown(x), shown(y)) for i, (x, y) in enumerate(zip(pa, pb)) if x != y]
        else:
            out.append(("arguments", shown(" ".join(pa)) if pa else "unset", shown(" ".join(pb)) if pb else "unset"))
    for key in dict.fromkeys([*fb, *fa]):
        va, vb = fa.get(key), fb.get(key)
        if va == vb:
            continue
        # as the head spells it, where both sides spell it alike; else as vLLM reads either (dashes)
        names = {n for n in (spelled.get(key), spelled_before.get(key)) if n}
        name = names.pop() if len(names) == 1 else key
        one_a = va[-1] if va and len(va) == 1 else None
        one_b = vb[-1] if vb and len(vb) == 1 else None
        ja, jb = _json_object(one_a), _json_object(one_b)
        ca, cb = _command(one_a), _command(one_b)
        if ja is not None and jb is not None:
            out += [(f"{name} {k}", shown(x), shown(y)) for k, x, y in field_changes(ja, jb)]
        elif ca is not None and cb is not None and depth < 2:
            out += [(f"{name} {k}", x, y) for k, x, y in flag_changes(ca, cb, depth + 1)]
        else:
            out.append((name, shown(_flag_value(va)), shown(_flag_value(vb))))
    return out


def launch_changes(where: str, before: list[str] | None, after: list[str] | None) -> list[Moved]:
    """A launch line's changes, one per flag: ``engines[0].http.server.launch: --max-num-batched-tokens 2048 →
    4096``."""
    return [Moved(where, flag, x, y) for flag, x, y in flag_changes(before, after)]


def _argv(value) -> list[str] | None:
    return value if isinstance(value, list) and all(isinstance(w, str) for w in value) else None


def config_changes(before: dict, after: dict, ignored: tuple[str, ...] = ()) -> list[Moved]:
    """The config's changes, one per field (its top-level sections in ``ignored`` left out); a launch line's, one per
    flag."""
    out: list[Moved] = []
    for key, x, y in field_changes({k: v for k, v in before.items() if k not in ignored},
                                   {k: v for k, v in after.items() if k not in ignored}):
        if key.endswith(".launch") and all(v is None or v is UNSET or _argv(v) for v in (x, y)):
            out += launch_changes(key, _argv(x), _argv(y))
        else:
            out.append(Moved(key, "", shown(x), shown(y)))
    return out


# --- files -------------------------------------------------------------------------------------------------------


def parsed(path: str, text: str | None, config_file: bool = False):
    """A YAML or JSON file's document (``UNSET`` where the file is not one, is too large or does not parse); with
    ``config_file``, a vLLM ``--config`` file's keys as vLLM reads them (underscores as dashes, a JSON string
    value as its object)."""
    import yaml

    from gate.errors import ConfigError
    from gate.inputs.yaml_text import load_yaml, screen_yaml

    if text is None or len(text) > MAX_PARSED or not (config_file or path.lower().endswith(STRUCTURED)):
        return UNSET
    try:
        if path.lower().endswith(".json"):
            doc = json.loads(text)
        else:
            screen_yaml(text, path)  # no aliases (a bomb), no deep nesting
            doc = load_yaml(text)
    except (ValueError, RecursionError, ConfigError, yaml.YAMLError):  # a document the parser refuses
        return UNSET
    if config_file and isinstance(doc, dict):
        doc = {str(k).replace("_", "-"): _json_object(v) or v if isinstance(v, str) else v for k, v in doc.items()}
    return doc


def file_changes(path: str, before: str | None, after: str | None, config_file: bool = False) -> list[Moved] | None:
    """A YAML or JSON file's changes, one per key (``vllm.yaml: max-num-batched-tokens 2048 → 4096``; [] where only
    comments or formatting moved); None where either side is not such a file (then only "it changed" is known)."""
    a, b = parsed(path, before, config_file), parsed(path, after, config_file)
    if a is UNSET or b is UNSET:
        return None
    return [Moved(path, key or "(the document)", shown(x), shown(y)) for key, x, y in field_changes(a, b)]


@dataclass(frozen=True)
class Loaded:
    """A file or folder a launch line makes its server load: its path as the line names it, the flag that names it
    (``--chat-template``, ``--config v.yaml chat-template``), and what it is where the flag does not say."""

    path: str
    flag: str
    role: str = ""  # "the head", "the draft", "the served model"
    config_file: bool = False  # a vLLM --config file: flags as YAML keys

    @property
    def what(self) -> str:
        return f"{self.flag}, {self.role}" if self.role else self.flag


def _shell_line(preset: str, argv: list[str]) -> list[str]:
    """The words of the line a shell wrapper runs (``bash -c 'vllm serve …'``), where the line itself does not start
    the stack; else the line."""
    if starts_stack(preset, argv) or not argv or PurePosixPath(argv[0]).name not in _SHELLS or "-c" not in argv:
        return argv
    at = argv.index("-c")
    inner = _command(argv[at + 1]) if at + 1 < len(argv) else None
    return inner if inner is not None and starts_stack(preset, inner) else argv


def loaded_files(preset: str | None, argv: list[str], read: Read = read_text) -> list[Loaded]:
    """What a launch line of ``preset`` makes its server load from files: its stack's ``files`` flags (on the line,
    or in its ``--config`` file, which ``read`` reads), the draft, the head and the served model (a local path or a
    hub id: the caller keeps what is in the repository)."""
    stack = find(preset)
    if stack is None or not stack.reads_launch or not argv:
        return []
    argv = _shell_line(stack.name, argv)
    flags = launch_flags(argv)
    file, at = stack.config_file(flags, read), stack.config_path(flags)
    out: list[Loaded] = []
    for f in stack.files:
        if f in flags:
            out.append(Loaded(flags[f], f, config_file=f in stack.config_flags))
        elif f.startswith("--") and isinstance(file.get(f[2:].replace("_", "-")), str):
            out.append(Loaded(file[f[2:].replace("_", "-")], f"{at[0]} {at[1]} {f[2:]}"))
    try:
        spec = read_launch(stack.name, argv, read)
    except ValueError:  # a flag that is not a number: validate says so; the paths are still followed below
        spec = None
    if spec is not None and spec.draft:
        out.append(Loaded(spec.draft, spec.draft_flag or "", "the draft"))
    if spec is not None and spec.head:
        out.append(Loaded(spec.head, spec.head_flag or "", "the head"))
    for _flag, value, given in served(stack.name, argv, read).get("model", []):
        if value:
            out.append(Loaded(value, given or "", "the served model"))
    return list({x.path: x for x in reversed(out)}.values())[::-1]  # each path once, as first named


__all__ = ["LINE_CAP", "UNSET", "Loaded", "Moved", "config_changes", "field_changes", "file_changes",
           "flag_changes", "inert", "launch_changes", "loaded_files", "parsed", "shown"]
