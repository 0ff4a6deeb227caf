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
* ``noise_floor`` — the same for the non-speculative reference at each batch size;
* ``reproducibility`` — bitwise identity across batch sizes and across runs,
  separately for speculative and non-speculative decoding;
* ``distribution`` — the sampling tests, with the control and measured power;
* ``speedup`` — see :mod:`gate.checks.speedup`;
* ``verdicts`` — one line per check and engine: pass, fail, warn or info, and why.

Only the target (and, for sampling, the draft) is needed: no generation happens here.
"""
