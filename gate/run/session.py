"""What one command shares across its stages: how much it says and where its time went (:class:`Session`), passed
in, never a module global."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from gate.io.documents import PhasesDoc
from gate.io.rundir import PHASES, RunDir
from gate.run.phases import Phases


@dataclass
class Session:
    """One command: how much it says (0: only the verdict, -q; 1: progress and the report; 2: also the libraries'
    own output, -v) and where its time went (the clock starts when the session is made)."""

    verbosity: int = 1
    phases: Phases = field(default_factory=Phases)
    budget: Any = None  # checks.budget_minutes, once the run stage sets it (gate.run.budget.Budget)

    def say(self, msg: str) -> None:
        if self.verbosity >= 1:
            print(msg, file=sys.stderr, flush=True)

    def write_phases(self, out: RunDir) -> None:
        """phases.json: where this command's time went so far."""
        out.write_json(PHASES, PhasesDoc.model_validate(self.phases.to_dict()))

    def quiet_libraries(self) -> None:
        """transformers' weight-loading progress bars would interleave with the gate's own progress; -v keeps
        them."""
        if self.verbosity >= 2:
            return
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


def set_threads(threads: int | None) -> None:
    if threads:
        import torch

        torch.set_num_threads(threads)


__all__ = ["Session", "set_threads"]
