"""What the reproducibility line calls an engine of another stack that showed no speculation: one whose counters
show no drafts, or one that reports no counters at all (eBay/spec_dec's batchers as plug-ins: "reported no
speculation" read as if speculation were off)."""

from __future__ import annotations

from types import SimpleNamespace

from gate.checks.reproducibility import decoding
from gate.engines.base import SpecCounters


class Stub:
    def __init__(self, counters):
        self.executions = [SimpleNamespace(engine="plug", counters=lambda: counters)]

    def own_references(self):
        return {}

    def other_stacks(self):
        return {"plug": None}

    def speculated(self, engine):
        return False


def test_an_engine_without_counters_is_not_said_to_have_reported_no_speculation():
    assert decoding(Stub(None), "plug") == (
        False, "decoding (the engine reports no speculation counters, so whether it speculated is unknown)")
    assert decoding(Stub(SpecCounters()), "plug") == (False, "decoding (its counters show no drafts)")
    assert decoding(Stub(None), "reference") == (False, None)
