"""The serving stacks a run launches: every server the config's engines name with a ``launch`` line (and, in paired
mode, the base config's), started side by side before the gate loads its own models, and torn down whatever
happens (docs/serving.md)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path


@contextlib.contextmanager
def serving(say: Callable[[str], None], loaded, out: Path, base=None) -> Iterator[list]:
    """Launch every serving stack the config asks the gate to start, side by side and before the gate loads its
    own models (a stack takes minutes to load a model; the gate's load overlaps it); yields the launched servers,
    which the run waits for, and tears them all down on leaving, whatever happens.  In paired mode with a served
    head (``base``: the base config as :func:`gate.engines.paired.base_side` read it, its server on a port of
    its own), the base's server is launched beside the head's (named ``base-<engine>``); the reference is the
    head's.  ``{port}`` in a launch line is the port of the endpoint's url."""
    from gate.engines.paired import paired_head
    from gate.engines.registry import base_engine_of, engine_type
    from gate.engines.server import Server
    from gate.inputs.launch import fill_port

    stacks = [(loaded, e.label, i, e.endpoints()) for i, e in enumerate(loaded.config.engines)]
    head = paired_head(loaded) if base is not None else None
    if head is not None and head.endpoints():
        spec = base_engine_of(head, base, engine_type(head).noun)
        stacks.append((base, f"base-{head.label}", base.config.engines.index(spec),
                       [(f, ep) for f, ep in spec.endpoints() if f.endswith(".server")]))
    with contextlib.ExitStack() as stack:
        launched = []
        for owner, label, i, endpoints in stacks:
            for where, ep in endpoints:
                if not ep.launch:
                    continue
                role = where.rsplit(".", 1)[-1]
                argv = fill_port(list(ep.launch), ep.url)
                say(f"starting {label} {role}: {' '.join(argv)}")
                log = owner.resolve_path(ep.log) if ep.log else out / f"{label}-{role}.log"
                log.parent.mkdir(parents=True, exist_ok=True)
                server = Server(argv, ep.url, ep.health, ep.startup_timeout_s, dict(ep.env),
                                f"engines[{i}].{where}" + (f" of {owner.source}" if owner is not loaded else ""),
                                log_path=log)
                stack.callback(server.stop)  # registered before the launch: a launch that fails midway is stopped
                launched.append(server.launch())
        yield launched


__all__ = ["serving"]
