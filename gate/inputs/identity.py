"""Does a run belong to a config?  The one rule every command uses (``check`` before it loads a model, ``baseline
refresh`` before it writes): the same validated config (its digest), the same suite, the same models (content
fingerprints)."""

from __future__ import annotations

from gate.errors import Problem, SpecguardError


def differences(loaded, fingerprint) -> list[str]:
    """What differs between the config ``loaded`` and a run's ``fingerprint``, one phrase each (empty: its run)."""
    from gate.inputs.model_files import dtype_text, fingerprint_model, model_location
    from gate.inputs.suite import suite_for

    differs = []
    if loaded.config.digest() != fingerprint.config:
        differs.append("config (its settings differ from the ones the run used)")
    suite = suite_for(loaded)
    if suite.fingerprint() != fingerprint.suite.fingerprint:
        differs.append(f"suite ({suite.name} {suite.fingerprint()} vs the run's {fingerprint.suite.name} "
                       f"{fingerprint.suite.fingerprint})")
    models = loaded.config.models
    device = None  # torch resolves it only where the dtype's text needs it (an import of torch: a second of CPU)
    for role, spec in (("target", models.target), ("draft", models.draft)):
        ran = fingerprint.models.get(role)
        if spec is None:  # a method without a draft model (n-gram, EAGLE's head, a plug-in's own)
            if ran is not None:
                differs.append(f"{role} model (the run used one; this config names none)")
            continue
        location = model_location(loaded, spec)
        dtype = dtype_text(spec.dtype, models.device)
        if dtype is None:
            from gate.inputs.models import resolve_device, resolve_dtype

            device = device or resolve_device(models.device)
            dtype = resolve_dtype(spec.dtype, device)
        if ran is None or fingerprint_model(location, spec, dtype) != ran.fingerprint:
            differs.append(f"{role} model ({location} is not the model the run used)")
    return differs


def refuse_unless_made_with(loaded, fingerprint, source: str) -> None:
    """Refuse (exit 2) a run made with another config, suite or models, before any model is loaded."""
    differs = differences(loaded, fingerprint)
    if differs:
        raise SpecguardError(Problem(source, "these results were not made with this config: " + "; ".join(differs),
                                     hint="run `specguard gate CONFIG` (or pass the --out of a run of this config)"))
