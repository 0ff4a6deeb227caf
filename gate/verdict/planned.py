"""What ``specguard plan`` says of the baseline a gate will be judged against, before the run is paid for: the
planner (:mod:`gate.run.estimate`) knows nothing of baselines, which live a layer above it."""

from __future__ import annotations

from pathlib import Path

from gate.errors import BaselineError
from gate.verdict.store import BaselineStore, Stored, baselines_root, lookup, shown_path

# What to do where a runner has no baseline, said by the plan's warnings and by the stop alike
FIX = ("run the refresh workflow on this runner first (or, if this runner is the same machine as one of the keys "
       "that have one, set the hardware-key input or baseline.hardware_key to it)")


def _others(stored: Stored) -> str:
    return f"; baselines exist for {', '.join(stored.others)}" if stored.others else ""


def plan(config: str, out: str | None = None, against: str | None = None, *, baselines_dir: str | None = None,
         refresh: bool = False, **options):
    """``specguard plan`` and ``gate --plan-to``: :func:`gate.run.estimate.plan_config` (``options``: its keywords),
    and the baseline the gate will be judged against under the same key rule as the gate's (``--hardware-key``,
    else ``baseline.hardware_key``, else this machine's), with a warning where the verdict is already decided
    before the run is paid for (:func:`planned`)."""
    from gate.inputs.config import DEMO_CONFIG, load_config
    from gate.run.estimate import plan_config

    report = plan_config(config, out, against, **options)
    loaded = load_config(config)
    if baselines_dir is None and loaded.source.resolve() == DEMO_CONFIG:
        baselines_dir = "baselines"  # as `specguard demo` runs it: this repository's committed baselines
    rules = loaded.config.baseline
    report.baseline, warning = planned(baselines_root(baselines_dir, loaded=loaded), loaded.baseline_name,
                                       key_for(loaded, options.get("hardware_key")), rules.on_missing, refresh,
                                       rules.history)
    if warning:
        report.warnings.append(warning)
    return report


def key_for(loaded, given: str | None) -> str:
    """The hardware key a gate of ``loaded`` stores and looks up its baseline under: ``--hardware-key`` (``given``),
    else ``baseline.hardware_key``, else this machine's (:func:`gate.inputs.fingerprint.baseline_key`)."""
    from gate.inputs import fingerprint as fp
    from gate.inputs.models import resolve_device

    return fp.baseline_key(given, loaded.config.baseline.hardware_key,
                           fp.hardware(resolve_device(loaded.config.models.device)))


def stop_without_baseline(config: str, baselines_dir: str | None = None, hardware_key: str | None = None) -> None:
    """``baseline.on_missing: stop``: a gate with no baseline for its hardware key (or an unusable one) ends here,
    before any server starts or model loads, with exit 3 (:class:`BaselineError`) naming the keys that have one:
    the run could only fail, so none of it is paid for.  Under ``neutral`` and ``fail`` the run goes on."""
    from gate.errors import Problem
    from gate.inputs.config import load_config
    from gate.run.setup import refuse_unkeyed_remote

    loaded = load_config(config)
    rules = loaded.config.baseline
    if rules.on_missing != "stop":
        return
    refuse_unkeyed_remote(loaded, hardware_key)  # a remote server's key first: this machine's would be the wrong one
    key = key_for(loaded, hardware_key)
    stored = lookup(baselines_root(baselines_dir, loaded=loaded), loaded.baseline_name, key, keep=rules.history)
    if stored.baseline is not None:
        return
    raise BaselineError(Problem(
        str(loaded.source), f"no baseline '{loaded.baseline_name}' for hardware {key} (it would be {stored.path})"
        f"{_others(stored)}: the gate stopped before its run, which could only fail", field="baseline.on_missing",
        hint=FIX))


def planned(root: Path, name: str, hardware_key: str, on_missing: str, refresh: bool = False,
            keep: int = 20) -> tuple[str, str | None]:
    """What ``specguard plan`` says of the baseline a gate of this config will be judged against, before any of the
    run is paid for: a line, and a warning where the run's verdict is already decided or will stop (no baseline
    for this hardware key under ``baseline.on_missing: fail``: a failure whatever the run measures; a baseline
    that cannot be used: exit 3, after the whole run)."""
    shown = shown_path(BaselineStore(root, name, keep).path_for(hardware_key))
    if refresh:
        return f"the refresh writes {shown} (hardware {hardware_key})", None
    try:
        stored = lookup(root, name, hardware_key, keep=keep)  # as the gate's compare looks it up
    except BaselineError as exc:
        return (f"{shown} (hardware {hardware_key}): unusable",
                f"the gate would stop with exit 3 after the whole run: {exc}")
    if stored.baseline is not None:
        return f"{shown} (hardware {hardware_key})", None
    line = f"none for hardware {hardware_key} (it would be {shown}){_others(stored)}"
    decided = {"fail": "will fail whatever it measures", "stop": "will stop before its run (exit 3), measuring nothing"}
    if on_missing in decided:
        return line, (f"no baseline '{name}' for hardware {hardware_key}, and baseline.on_missing is {on_missing}: "
                      f"the gate {decided[on_missing]}; {FIX}")
    return line + ": nothing is compared with a baseline, and a run whose checks pass is neutral", None


__all__ = ["key_for", "plan", "planned", "stop_without_baseline"]
