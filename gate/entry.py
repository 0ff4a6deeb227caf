"""The ``specguard`` console script (and ``python -m gate``, and the Action's ``action/specguard.py``)."""

from __future__ import annotations

import os
import sys


def entry() -> None:
    """``specguard``: :func:`gate.cli.main`, then an exit past an abandoned plug-in thread
    (``engines[].isolation: thread``), whose torch threads would otherwise end the interpreter's shutdown with
    "terminate called without an active exception" (exit 134); the default, process isolation, has no such thread
    (docs/reliability.md)."""
    import gc
    import threading

    from gate.cli import main

    code = main()
    gc.disable()  # collecting the run's objects while a plug-in thread is inside torch can abort
    if any(t.name.startswith("specguard-engine-") and t.is_alive() for t in threading.enumerate()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    raise SystemExit(code)


__all__ = ["entry"]
