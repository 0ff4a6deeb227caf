"""A config's YAML text before any schema: screened for what no config needs, and indexed by key path for errors.

``screen_yaml`` refuses anchors and aliases (an alias bomb), nesting deeper than ``MAX_DEPTH``, duplicate keys and
files over ``MAX_SIZE`` in one linear pass over the parser's events; ``line_index`` maps each key path to the line
it is on, so that an error names the line of the field it is about.
"""

from __future__ import annotations

import yaml

from gate.errors import ConfigError, Problem

# libyaml's parser where PyYAML was built with it (the same events, nodes and marks, far faster); else PyYAML's own
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
MAX_DEPTH = 32  # a config is a few levels deep; far deeper is an attack or an accident
MAX_SIZE = 1 << 20  # bytes


def screen_yaml(text: str, name: str) -> None:
    """Refuse what no config needs before building anything: anchors and aliases (an alias bomb expands to
    gigabytes), nesting deeper than MAX_DEPTH (a recursion error), and files over 1 MiB.  Linear time."""
    if len(text) > MAX_SIZE:
        raise ConfigError(Problem(name, f"the file is {len(text):,} characters; a config is far smaller "
                                        f"(limit {MAX_SIZE:,})", hint="is this the right file?"))
    depth = 0
    # One frame per open collection: [is a mapping, a key is next, keys seen -> line, the current key].
    frames: list[list] = []

    def node(event) -> None:
        """A node (scalar or collection) starts in the innermost collection: a key or a value."""
        if not frames or not frames[-1][0]:
            return
        frame = frames[-1]
        if frame[1]:
            key = event.value if isinstance(event, yaml.ScalarEvent) else "(complex key)"
            if key in frame[2]:
                path = ".".join(str(f[3]) for f in frames[:-1] if f[0]) + ("." if len(frames) > 1 else "")
                raise ConfigError(Problem(name, f"duplicate key {key!r} (first on line {frame[2][key]}): YAML "
                                                "would silently keep only the last one",
                                          field=f"{path}{key}".lstrip("."), line=event.start_mark.line + 1,
                                          hint="merge the two into one"))
            frame[2][key] = event.start_mark.line + 1
            frame[3] = key
        frame[1] = not frame[1]

    try:
        for event in yaml.parse(text, Loader=LOADER):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise ConfigError(Problem(name, "YAML anchors and aliases (&name, *name) are not accepted in a "
                                                "config", line=event.start_mark.line + 1,
                                          hint="write the values out; a config needs no references"))
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                node(event)
                frames.append([isinstance(event, yaml.MappingStartEvent), True, {}, None])
                depth += 1
                if depth > MAX_DEPTH:
                    raise ConfigError(Problem(name, f"nested more than {MAX_DEPTH} levels deep",
                                              line=event.start_mark.line + 1, hint="see docs/config.md for the layout"))
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                frames.pop()
                depth -= 1
            elif isinstance(event, yaml.ScalarEvent):
                node(event)
    except yaml.YAMLError:
        return  # reported with its line by the parser below


def load_yaml(text: str):
    """The YAML document as Python data (``yaml.safe_load``, with ``LOADER``)."""
    return yaml.load(text, Loader=LOADER)


def line_index(text: str) -> dict[tuple, int]:
    """Map each key path in the YAML document to its 1-based line number."""
    index: dict[tuple, int] = {}

    def walk(node, path: tuple) -> None:
        index.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                key = (*path, k.value)
                index[key] = k.start_mark.line + 1
                walk(v, key)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, (*path, i))

    try:
        root = yaml.compose(text, Loader=LOADER)
    except yaml.YAMLError:
        return index
    if root is not None:
        walk(root, ())
    return index


__all__ = ["LOADER", "MAX_DEPTH", "MAX_SIZE", "line_index", "load_yaml", "screen_yaml"]
