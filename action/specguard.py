"""The Action's way into specguard: ``"$PYTHON" "$ACTION_PATH/action/specguard.py" COMMAND ...``.

Not ``python -m gate``: that puts the working directory (the model repository) first on ``sys.path``, and a
repository with its own ``gate.py`` or ``gate/`` would run instead of specguard, with the step's token in its
environment.  A script run by its path puts only its own folder there; it is dropped here, before anything is
imported, so ``gate`` comes from the Action's checkout (first on ``PYTHONPATH``, set by ``action/setup.py``).

``verdictfile RUN_DIR [--run-id ID]`` runs :mod:`gate.verdict.file` (standard library only: the Outcome step
needs it even when the set-up failed); anything else is the ``specguard`` command line.
"""

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
del sys.path[0]  # this folder (action/): nothing is imported from it

# Refuse to run any other `gate` than the one beside this file (say, a PYTHONPATH entry planted before the
# Action's): located without running its code.
found = importlib.util.find_spec("gate")
if found is None or found.origin is None or Path(found.origin).resolve().parents[1] != HERE.parent:
    where = Path(found.origin).resolve().parent if found is not None and found.origin else "nowhere"
    print(f"::error title=specguard::refusing to run: `gate` resolves to {where}, not to the Action's checkout at "
          f"{HERE.parent} (is another `gate` first on PYTHONPATH?)")
    raise SystemExit(2)

if sys.argv[1:2] == ["verdictfile"]:
    import gate.verdict.file as entry_module

    main = entry_module.main
    argv = sys.argv[2:]
else:
    import gate.entry as entry_module

    main = None
    argv = sys.argv[1:]

if main is not None:
    raise SystemExit(main(argv))
sys.argv = ["specguard", *argv]
entry_module.entry()
