"""A run's set-up, before anything is generated: the inputs (config, suite, run directory, the plug-ins' workers,
checked before minutes of model loading), then the models and engines (the pair, each configured engine, paired
mode's base, the engines' own plain decodings)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gate.errors import Problem, SpecguardError
from gate.io.rundir import RunDir
from gate.run.session import Session, set_threads

if TYPE_CHECKING:  # torch and transformers load with the stages that need them
    from gate.engines.paired import PairedBase
    from gate.engines.plugin import ProcessCallable
    from gate.inputs.config import Config, LoadedConfig
    from gate.inputs.models import ModelPair
    from gate.inputs.suite import Suite
    from gate.run.results import Results


@dataclass
class Inputs:
    """Everything a run needs before any model loads: the config, its suite, the run directory, and the
    plug-in workers that already loaded (by engine name: the label, and `<label>.reference` for a plug-in's own
    reference callable)."""

    loaded: LoadedConfig
    suite: Suite
    out: RunDir
    workers: dict[str, ProcessCallable] = field(default_factory=dict)


def out_dir(loaded, flag: str | None) -> RunDir:
    return RunDir(flag if flag else loaded.resolve_path(loaded.config.output.dir))


def refuse_unkeyed_remote(loaded, hardware_key: str | None) -> None:
    """Exit 2 where a server the gate does not launch runs elsewhere and no hardware key names that machine: the
    baseline would be keyed by the runner's CPU, which timed nothing (issue 48, item 7)."""
    from gate.inputs.launch import remote_servers

    remote = remote_servers(loaded.config.engines)
    if remote and not (hardware_key or loaded.config.baseline.hardware_key):
        where, url = remote[0]
        raise SpecguardError(Problem(str(loaded.source), f"{where} ({url}) runs on another machine, whose hardware "
                                     "the runner cannot read: its baseline would be keyed by this runner's CPU",
                                     field="baseline.hardware_key",
                                     hint="name the serving hardware (e.g. h100-80gb-tp4) in baseline.hardware_key, "
                                          "or pass --hardware-key (the Action's hardware-key input)"))


def load_inputs(session: Session, config: str, out: str | None, threads: int | None = None,
                hardware_key: str | None = None) -> Inputs:
    """The config, its suite and the plug-ins, checked before minutes of model loading; a remote server's
    hardware key (``--hardware-key``, else ``baseline.hardware_key``) required."""
    with session.phases("setup (imports, config, suite)"):
        # The imports a run needs (torch, transformers) count as setup, not as the first phase that uses them.
        import gate.engines
        import gate.inputs.models
        import gate.run.cache
        import gate.run.progress
        import gate.run.runner  # noqa: F401
        from gate.engines import preflight_problems
        from gate.inputs.config import load_config
        from gate.inputs.suite import suite_for

        set_threads(threads)
        loaded = load_config(config)
        refuse_unkeyed_remote(loaded, hardware_key)
        rundir = out_dir(loaded, out)
        suite = suite_for(loaded)
        workers: dict = {}
        bad_plugins = preflight_problems(loaded, log_dir=rundir.path, prepared=workers)
        if bad_plugins:
            raise SpecguardError(bad_plugins)
    return Inputs(loaded, suite, rundir, workers)


def config_of(results: Results) -> Config:
    """The config a run was made with (``compare`` needs no config file); for a run made before results.json kept
    it, the default rules over its models."""
    from gate.inputs.config import Config

    if results.config is not None:
        return results.config
    return Config.model_validate({"models": {r: {"path": m.location} for r, m in results.fingerprint.models.items()}})


@dataclass
class Models:
    pair: ModelPair
    engines: list
    base: PairedBase | None = None  # paired mode: the base's draft and k, timed beside the head's
    own_references: list = field(default_factory=list)  # plug-ins' own plain decoding (engines[].reference)


def load_models(session: Session, inputs: Inputs, base=None) -> Models:
    """The model pair and the engines; ``base``: paired mode's base side (:func:`gate.engines.paired.base_side`)."""
    from gate.engines import build_engine, build_own_reference
    from gate.engines.paired import paired_engine
    from gate.inputs.models import load_pair

    loaded = inputs.loaded
    models = loaded.config.models
    session.say(f"loading models: target {models.target.path}"
                + (f", draft {models.draft.path}" if models.draft else
                   f" ({loaded.config.method.name}: no draft model)"))
    with session.phases("model load"):
        session.quiet_libraries()
        pair = load_pair(loaded)
        engines = [build_engine(e, pair, loaded, log_dir=inputs.out.path, prepared=inputs.workers.get(e.label))
                   for e in loaded.config.engines]
        paired = paired_engine(base, loaded, pair, log_dir=inputs.out.path) if base is not None else None
        own = [build_own_reference(spec, engine, pair, loaded, log_dir=inputs.out.path,
                                   prepared=inputs.workers.get(spec.own_reference_name))
               for spec, engine in zip(loaded.config.engines, engines, strict=True)]
    return Models(pair, engines, paired, [e for e in own if e is not None])


def load_pair(session: Session, loaded):
    """The model pair alone (``check``: the run is done, only re-scoring needs the target)."""
    from gate.inputs.models import load_pair

    with session.phases("model load"):
        session.quiet_libraries()
        return load_pair(loaded)


__all__ = ["Inputs", "Models", "config_of", "load_inputs", "load_models", "load_pair", "out_dir"]
