"""``specguard validate``: every problem of a config at once, before any weight loads: its schema, its paths, its
suite, what each engine's type checks before a run (a plug-in's callable, imported in its own worker)."""

from __future__ import annotations

from dataclasses import dataclass

from gate.errors import Problem, SpecguardError


@dataclass
class Validation:
    problems: list[Problem]
    notes: list[str]
    summary: str  # "N prompts in M slices: a, b" when valid


def validate(config: str) -> Validation:
    """Every problem of a config at once: its schema, its paths, its suite, its plug-ins (imported in their own
    workers)."""
    from gate.engines import preflight_problems
    from gate.inputs.config import load_config
    from gate.inputs.paths import check_paths, model_notes
    from gate.inputs.suite import suite_for

    problems, suite, loaded = [], None, None
    try:
        loaded = load_config(config)
    except SpecguardError as exc:
        problems += exc.problems
    problems += check_paths(config)
    if loaded is not None and not any(p.field == "suite.path" for p in problems):
        try:
            suite = suite_for(loaded)
        except SpecguardError as exc:
            problems += exc.problems
    if loaded is not None:
        problems += preflight_problems(loaded)
    summary = (f"{len(suite.prompts)} prompts in {len(suite.slices)} slices: {', '.join(suite.slices)}"
               if suite is not None and not problems else "")
    return Validation(problems, model_notes(config) if not problems else [], summary)


__all__ = ["Validation", "validate"]
