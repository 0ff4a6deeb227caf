"""``specguard validate``: every problem of a config at once, before any weight loads, and nothing ``plan`` or
``gate`` would refuse later: its schema, its paths, its suite, what each engine's type checks before a run (a
plug-in's callable, imported in its own worker), and the plan itself (the models' configs and tokenizers, every
prompt tokenized and every chat row rendered, exactly as ``plan`` does), with the plan's warnings (a launch line's
executable missing here, servers that cannot share a GPU, repeated rows, sampled tokens no test reads)."""

from __future__ import annotations

from dataclasses import dataclass

from gate.errors import Problem, SpecguardError


@dataclass
class Validation:
    problems: list[Problem]
    notes: list[str]
    summary: str  # "N prompts in M slices: a, b" when valid


def validate(config: str) -> Validation:
    """Every problem of a config at once, and the notes and warnings ``plan`` would print."""
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
    notes = []
    if loaded is not None and suite is not None and not problems:
        from gate.run.estimate import plan_config

        try:  # the plan's own path, so that validate and plan never disagree on a config
            notes += [f"warning: {w}" for w in plan_config(config).warnings]
        except SpecguardError as exc:
            problems += exc.problems
    summary = (f"{len(suite.prompts)} prompts in {len(suite.slices)} slices: {', '.join(suite.slices)}"
               if suite is not None and not problems else "")
    return Validation(problems, (model_notes(config) + notes) if not problems else [], summary)


__all__ = ["Validation", "validate"]
