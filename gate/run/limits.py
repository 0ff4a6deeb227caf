"""The limits a run's time is held to, for ``specguard plan``: the job's timeout, and a budget.

The timeout is ``--timeout-minutes`` where given; else the workflow under ``.github/workflows`` (of the repository
holding the config) whose step uses the specguard action with this config (its ``with.config``, by default
``specguard.yaml``; an expression such as ``${{ inputs.config }}`` may be any config) in a mode that runs the gate
(not ``changed``): the step's ``timeout-minutes``, else its job's, else GitHub's default of 360.  Where several
steps call it, the shortest limit binds.  ``plan`` warns where its estimate exceeds a limit.

A budget (``checks.budget_minutes``, ``--budget-minutes``) is one more :class:`Limit`, which ``plan`` appends with
what it keeps and drops (:func:`gate.run.budget.plan_fit`); the run fits itself to it (:mod:`gate.run.budget`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

GITHUB_DEFAULT_MINUTES = 360  # a job without timeout-minutes


@dataclass(frozen=True)
class Limit:
    name: str  # "timeout" or "budget"
    minutes: float
    source: str  # where it was read, in words

    def to_json(self) -> dict:
        return {"name": self.name, "minutes": self.minutes, "from": self.source}


def _repo_root(start: Path) -> Path | None:
    """The folder holding ``.github/workflows``, from ``start`` up to the repository's root (a ``.git``)."""
    for d in (start, *start.parents):
        if (d / ".github" / "workflows").is_dir():
            return d
        if (d / ".git").exists():
            return None
    return None


def _minutes(value) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)) and value > 0:
        return float(value)
    return None


def _uses_action(uses) -> bool:
    if not isinstance(uses, str):
        return False
    name = uses.split("@", 1)[0].rstrip("/")
    return name.rsplit("/", 1)[-1] == "specguard" or name.endswith("/specguard/action")


def workflow_timeout(config: Path) -> tuple[Limit | None, str]:
    """(the job's timeout as the repository's workflows set it for ``config``, or None; what was found, in words)."""
    import yaml

    config = config.resolve()
    root = _repo_root(config.parent)
    if root is None:
        return None, f"no .github/workflows above {config.parent}"
    rel = config.relative_to(root).as_posix()
    found: list[Limit] = []
    unread = []
    for wf in sorted((root / ".github" / "workflows").glob("*.y*ml")):
        try:
            doc = yaml.safe_load(wf.read_text())
        except (OSError, yaml.YAMLError):
            unread.append(wf.name)
            continue
        jobs = doc.get("jobs") if isinstance(doc, dict) else None
        for job_name, job in (jobs.items() if isinstance(jobs, dict) else ()):
            if not isinstance(job, dict):
                continue
            steps = job.get("steps")
            for step in steps if isinstance(steps, list) else ():
                if not isinstance(step, dict) or not _uses_action(step.get("uses")):
                    continue
                given = step.get("with") or {}
                if str(given.get("mode", "check")) == "changed":
                    continue
                named = str(given.get("config", "specguard.yaml"))
                if "${{" not in named and Path(named).as_posix().removeprefix("./") != rel:
                    continue
                where = wf.relative_to(root).as_posix()
                for value, what in ((step.get("timeout-minutes"), f"the step's timeout-minutes in job {job_name}"),
                                    (job.get("timeout-minutes"), f"jobs.{job_name}.timeout-minutes")):
                    if value is not None:
                        minutes = _minutes(value)
                        if minutes is None:
                            unread.append(f"{where} ({what}: {value!r})")
                            break
                        found.append(Limit("timeout", minutes, f"{what} in {where}"))
                        break
                else:
                    found.append(Limit("timeout", GITHUB_DEFAULT_MINUTES,
                                       f"GitHub's default: jobs.{job_name} in {where} sets no timeout-minutes"))
    if not found:
        why = f"no workflow under {root / '.github' / 'workflows'} runs the specguard action on {rel}"
        return None, why + (f" (not read: {', '.join(unread)})" if unread else "")
    best = min(found, key=lambda lim: lim.minutes)
    others = len(found) - 1
    return best, best.source + (f", the shortest of {len(found)} jobs that call it" if others else "")


def limits(config: Path, timeout_minutes: float | None = None) -> tuple[list[Limit], str]:
    """The job's timeout the plan's estimate is held to, and a note where it was not found (a budget is appended by
    :func:`gate.run.budget.plan_fit`)."""
    if timeout_minutes is not None:
        return [Limit("timeout", timeout_minutes, "--timeout-minutes")], ""
    limit, said = workflow_timeout(config)
    return ([limit] if limit else []), ("" if limit else said)


def over(limit: Limit, estimate_s: tuple[float, float], counted: str = "") -> str | None:
    """A warning where an estimate exceeds a limit; None where it fits."""
    lo, hi = estimate_s
    cap = limit.minutes * 60
    if hi <= cap:
        return None
    how = "even its lower end, " if lo > cap else "its upper end, "
    end = lo if lo > cap else hi
    fate = ("the job will be cancelled before the verdict" if lo > cap else
            "the job may be cancelled before the verdict")
    return (f"the estimate exceeds the {limit.name} of {limit.minutes:g} min ({limit.source}): {how}"
            f"{end / 60:.0f} min{counted}; {fate}: raise the {limit.name}, or plan less work (fewer batch sizes, "
            "checks.speedup.max_repeats or time_budget_s, checks.distribution.num_samples)")


__all__ = ["GITHUB_DEFAULT_MINUTES", "Limit", "limits", "over", "workflow_timeout"]
