"""Every error class of the gate, in one place, and the exit codes.

Every error the CLI prints names where the problem is (file, line, dotted field
path), what was wrong, and what to do about it.  Programming errors stay plain
exceptions with tracebacks.  This module imports nothing of the gate: every stage
may raise what it defines.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass
class Problem:
    """One thing wrong with one input."""

    source: str  # file name, or a logical source such as "engine 'inhouse'"
    message: str  # what is wrong and what was expected
    field: str | None = None  # dotted field path, e.g. "models.target.dtype"
    line: int | None = None
    hint: str | None = None  # what to do about it

    def __str__(self) -> str:
        where = self.source + (f":{self.line}" if self.line else "")
        text = f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"
        return f"{text} ({self.hint})" if self.hint else text


class Interrupted(BaseException):
    """The run was asked to stop (SIGTERM; SIGINT arrives as KeyboardInterrupt).

    Here, not in :mod:`gate.run.execute`, so the CLI can catch it without importing torch."""


class SpecguardError(Exception):
    """An error caused by the user's input or environment, with every problem found."""

    exit_code = 2

    def __init__(self, problems: Problem | str | Iterable[Problem]):
        if isinstance(problems, (Problem, str)):
            problems = [problems]
        self.problems = [p if isinstance(p, Problem) else Problem("specguard", p) for p in problems]
        super().__init__("\n".join(str(p) for p in self.problems))


def distinct(problems: Iterable[Problem]) -> list[tuple[Problem, int]]:
    """Each problem once, in the order first found, with how many times it was found (a line to print per row)."""
    counts: dict[str, list] = {}
    for p in problems:
        counts.setdefault(str(p), [p, 0])[1] += 1
    return [(p, n) for p, n in counts.values()]


def said(problem: Problem, count: int) -> str:
    """A problem as the CLI prints it; one found ``count`` times is printed once, with the count."""
    return f"error: {problem}" + (f" (x{count})" if count > 1 else "")


class ConfigError(SpecguardError):
    """The config file is invalid."""


class SuiteError(SpecguardError):
    """A prompt suite file is invalid."""


class ModelError(SpecguardError):
    """A model could not be loaded, or the pair does not fit together."""


class EngineError(SpecguardError):
    """An engine was misconfigured or returned something malformed."""


class ResultsError(SpecguardError):
    """A results file is missing, corrupt or from another schema version."""


class MergeError(SpecguardError):
    """The shards do not belong to one run."""


class ResumeError(SpecguardError):
    """``--resume`` was asked for a log from a different run setup."""


class AnchorError(SpecguardError):
    """The gate's reference confidently disagrees with transformers' generate() on this target."""


class BaselineError(SpecguardError):
    """The baseline cannot be used: corrupt, or another schema (exit code 3).  Another suite or k is compared
    where it can be (:class:`gate.verdict.baseline.Comparability`), not refused."""

    exit_code = 3


class RefreshRefused(SpecguardError):
    """A refresh from a run that failed equivalence or distribution, without --force (exit code 1)."""

    exit_code = 1


class GitError(SpecguardError):
    """git could not answer (a missing commit: check out with fetch-depth: 0)."""


class GitHubError(SpecguardError):
    """A GitHub API call failed; the text names the call, the HTTP status and what to do, never the token."""

    def __init__(self, problems, *, status: int | None = None, github_message: str | None = None):
        super().__init__(problems)
        self.status = status  # HTTP status, None when no answer came back
        self.github_message = github_message  # the ``message`` field of GitHub's JSON body, if any


class ReadOnlyToken(GitHubError):
    """403 "Resource not accessible by integration": the token may not write (e.g. a fork PR's GITHUB_TOKEN)."""


class NotFound(GitHubError):
    """404: the repository, pull request, branch or file does not exist, or the token cannot see it."""


class RateLimited(GitHubError):
    """Still rate limited when the next wait would have gone past ``max_total_wait_s``."""


class EngineFailure(Exception):
    """The engine under test failed on a batch (crash, timeout, out of memory, broken contract).

    Not an error of the gate: a finding about the engine, recorded as a failed execution and judged as a failing
    check; the run goes on with other batches.  (Re-exported by :mod:`gate.engines.base` for plug-ins.)"""

    def __init__(self, kind: str, type_: str, message: str):
        super().__init__(f"{type_}: {message}")
        self.kind = kind
        self.type = type_
        self.message = message


class RunInterrupted(BaseException):  # like KeyboardInterrupt: no `except Exception` may swallow it
    """The run was interrupted; its finished work is on disk (``results``, status ``interrupted``).

    Raised, not returned, so that every caller that runs several runs (the self-test, benchmarks,
    paired mode) stops too instead of going on with the next one."""

    def __init__(self, results):
        super().__init__(results.stopped_at.reason if results.stopped_at else "interrupted")
        self.results = results


# The exit codes (the table is in gate/cli.py's docstring, the README and `--help`).
EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_BASELINE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

def closest(word: str, choices: Iterable[str]) -> str | None:
    """The closest known spelling of ``word``, for 'did you mean' hints."""
    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.5)
    return found[0] if found else None
