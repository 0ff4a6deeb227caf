"""Judging a run: baselines (stored, with history), the judge that holds a run's summary against one, the verdict
document, and its read-back (:mod:`gate.verdict.file`, standard library only: this package imports nothing on load).
"""
