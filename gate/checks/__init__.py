"""Checks: turn a results document into findings and per-check verdicts.

Each check is a module with ``run(results, ctx) -> (findings, verdicts)`` and its
verdict rule beside it; :mod:`gate.checks.analysis` lists them and its ``run_checks`` returns a
:class:`gate.checks.doc.ChecksDoc` (written as ``checks.json``, ``specguard.checks/2``).  This package imports
nothing on load: ``gate.checks.doc`` serves the light commands.

* ``engine_failures`` — batches on which an engine crashed, hung, ran out of memory
  or broke the contract (findings about the engine, recorded as failed executions);
* ``equivalence`` — per engine and batch size, against the canonical reference
  (non-speculative, batch size 1): exact match, prefix match, argmax
  consistency, first-divergence classes, corruption signatures, examples;
* ``noise_floor`` — the same for the non-speculative reference at each batch size, and for each engine's own
  plain decoding (another stack's);
* ``stack_noise`` — another stack's own float noise, measured on its own plain decoding, and the tolerance it sets;
* ``reproducibility`` — bitwise identity across batch sizes, runs and batch compositions,
  separately for speculative and non-speculative decoding;
* ``distribution`` — the sampling tests, with the control and measured power;
* ``speedup`` — see :mod:`gate.checks.speedup`;
* ``traffic`` — request-rate load: latency percentiles, goodput, the latency speedup per rate and the crossover.

Each contributes verdict lines (pass, fail, warn or info, and why) and the ``checks.json`` section of its name.
Only the target (and, for sampling, the draft) is needed: no generation happens here.
"""
