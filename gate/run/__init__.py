"""Running the engines: the plan, the executor with its record log and reference cache, the anchor, calibration,
adaptive timing, the runner, and ``results.json`` (:mod:`gate.run.results`)."""
