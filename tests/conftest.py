"""Shared fixtures: the embedded demo pair, loaded once, offline."""

from __future__ import annotations

import os
import signal

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):  # `make test`: one worker per core, one thread each, children included
    os.environ["OMP_NUM_THREADS"] = "1"

import pytest
import torch
from helpers import THREADS, demo_config

import gate.engines  # noqa: F401  (registers the built-in engine types, as the CLI does before reading a config)


@pytest.fixture(scope="session", autouse=True)
def _threads():
    torch.set_num_threads(int(THREADS))


@pytest.fixture
def sigint_ignored_from_start():
    """The test runs as under a suite started as a background job of a non-interactive shell (`bash -c 'make test >
    log 2>&1 &'`): SIGINT ignored in this process and inherited as ignored by every process it starts, which is what
    Python leaves in place when it starts with SIGINT ignored (tests/test_reliability.py checks that).  A signal test
    sets the dispositions it needs (helpers.py), so it must pass from here; the one from before comes back after."""
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


@pytest.fixture(autouse=True)
def _one_anchor_per_worker(request, tmp_path_factory, monkeypatch):
    """A slow test's in-process gate runs with no cache (``output.cache_dir: null``) anchor the reference to
    ``generate()`` once per worker, not once per run: the anchor's key holds everything its result depends on
    (target, dtype, device, versions, prompts, settings), so a record made by another test of the same worker is the
    one this run would make.  tests/test_anchor.py tests the anchor itself and keeps the product's behaviour."""
    if request.node.get_closest_marker("slow") is None or request.module.__name__.endswith("test_anchor"):
        yield
        return
    from gate.run.anchor import Anchor

    shared = tmp_path_factory.getbasetemp() / "shared-anchor"
    original = Anchor.__init__

    def init(self, pair, reference, cache_root, *args, **kwargs):
        original(self, pair, reference, shared if cache_root is None else cache_root, *args, **kwargs)

    monkeypatch.setattr(Anchor, "__init__", init)
    yield


@pytest.fixture(scope="session")
def demo_pair():
    from gate.inputs.models import load_pair

    return load_pair(demo_config())


@pytest.fixture(scope="module")
def configs_only():
    """The demo pair's configs and tokenizer, no weights (as `plan` reads them): a fast test's pair."""
    from gate.inputs.models import ModelPair, config_only, load_tokenizer, resolve_device

    loaded, device = demo_config(), resolve_device("cpu")
    target = config_only(loaded, "target", device)
    return ModelPair(target, config_only(loaded, "draft", device), load_tokenizer(loaded, target.location, "target"),
                     device)


@pytest.fixture(scope="session")
def demo_prompts(demo_pair):
    """Prompts of very different lengths, from every slice of the default suite."""
    from gate.inputs.suite import load_suite

    suite = load_suite("gate/suites/default.jsonl")
    by_slice: dict[str, list] = {}
    for p in suite.prompts:
        by_slice.setdefault(p.slice, []).append(p)
    picked = [ps[i] for ps in by_slice.values() for i in (0, 3) if i < len(ps)]
    return [tuple(demo_pair.encode(p.text)) for p in picked]


@pytest.fixture(scope="session")
def light_python(tmp_path_factory):
    """A hosted runner's interpreter: the light dependencies only, no torch, transformers or numpy."""
    import light_python as lp

    return lp.make(tmp_path_factory.mktemp("hosted") / "venv")


# --- test tiers --------------------------------------------------------------------------------------------
# `make test-fast` runs `pytest -m "not slow"`. A test must be marked slow (`@pytest.mark.slow`, or a module's
# `pytestmark`) when it loads model weights through the gate (the demo pair, the self-test), starts a gate, run,
# check, demo or selftest in a subprocess, starts a plug-in worker process, or runs `act`. The guard below
# enforces that rule in both tiers (a session fixture built for a fast test counts as that test's), so the fast
# tier cannot grow slow unnoticed. A subprocess that itself starts a worker is not seen: mark those by hand.

HEAVY_COMMANDS = {"gate", "run", "check", "demo", "selftest"}


def _heavy(argv) -> str | None:
    """What a subprocess command line runs that belongs in the slow tier, or None."""
    if isinstance(argv, (str, bytes, os.PathLike)):
        argv = [argv]
    argv = [os.fsdecode(a) for a in argv]
    if argv and os.path.basename(argv[0]) == "act":
        return "runs act"
    for i, a in enumerate(argv[:-1]):
        if (a == "-m" and argv[i + 1] == "gate.engines.worker") or (a == "-c" and "gate.engines.worker" in argv[i + 1]):
            return "starts a plug-in worker process (an interpreter importing torch: seconds)"
        if a == "-m" and argv[i + 1] == "gate" and i + 2 < len(argv) and argv[i + 2] in HEAVY_COMMANDS:
            return f"starts `specguard {argv[i + 2]}` in a subprocess"
    if argv and os.path.basename(argv[0]) == "specguard" and len(argv) > 1 and argv[1] in HEAVY_COMMANDS:
        return f"starts `specguard {argv[1]}` in a subprocess"
    return None


_CURRENT: dict = {"item": None}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _CURRENT["item"] = item  # set before setup: session fixtures built for a fast test count as that test's
    yield
    _CURRENT["item"] = None


def _refuse_in_a_fast_test(what: str) -> None:
    item = _CURRENT["item"]
    if item is not None and not item.get_closest_marker("slow"):
        pytest.fail(f"{item.nodeid} {what}: mark it @pytest.mark.slow (tests/conftest.py, test tiers)",
                    pytrace=False)


def pytest_configure(config):
    import subprocess

    import gate.inputs.models

    real_load_one, real_popen_init = gate.inputs.models._load_one, subprocess.Popen.__init__

    def load_one(*args, **kwargs):
        model = real_load_one(*args, **kwargs)  # a load that fails on bad input is quick: only success counts
        _refuse_in_a_fast_test("loads model weights")
        return model

    def popen_init(self, args, *rest, **kwargs):
        what = _heavy(args)
        if what:
            _refuse_in_a_fast_test(what)
        return real_popen_init(self, args, *rest, **kwargs)

    gate.inputs.models._load_one = load_one
    subprocess.Popen.__init__ = popen_init


# Under `make test` (pytest-xdist, --dist worksteal) each worker takes its share in this order and an idle one
# steals from the end of another's: the tests that take minutes go first, then the slow modules heaviest first (a
# module's tests stay together, so its module fixtures are built once), the fast tier last. Then the suite does not
# end with one worker in a heavy module while the other waits. The order is only a schedule: a module missing
# from HEAVY_MODULES runs after them, and nothing fails when the weights drift.
# LONGEST, heaviest first, none with a module fixture (moved out of its module, a test would build it again): CPU
# seconds with one torch thread under `make test` on a quiet machine: on the Intel one (52b4422) the lifecycle 73,
# the self-test's halves 71 and 24, the repro self-test 41; on the AMD one (847d4eb) 112, 112 and 48, and 64.
LONGEST = ("test_lifecycle.py::test_a_baseline_through_its_whole_life",
           "test_cli.py::test_selftest_catches_every_mutant_and_passes_the_correct_engine[sampling-and-batches]",
           "test_repro.py::test_selftest_shrinks_mutants_to_cases_that_replay_against_the_mutant_and_not_the_correct_"
           "engine",
           "test_cli.py::test_selftest_catches_every_mutant_and_passes_the_correct_engine[greedy]")
# Wall seconds of each module's slow tests under `make test` (2026-12-07, quiet), heaviest first.
HEAVY_MODULES = ("test_http.py", "test_cli.py", "test_repro.py", "test_reliability.py", "test_neighbours.py",
                 "test_action.py", "test_engines.py", "test_served_cache.py", "test_checks.py", "test_paired.py",
                 "test_own_reference.py", "test_stack_noise_gate.py", "test_architectures.py", "test_toy_engine.py",
                 "test_truncation.py", "test_fuzz.py", "test_selftest.py", "test_chat_route.py")


def _schedule(item) -> tuple[int, int]:
    for i, name in enumerate(LONGEST):
        if item.nodeid.endswith(name):
            return 0, i
    if not item.get_closest_marker("slow"):
        return 3, 0
    module = item.nodeid.split("::")[0].rsplit("/", 1)[-1]
    return (1, HEAVY_MODULES.index(module)) if module in HEAVY_MODULES else (2, 0)


def pytest_collection_modifyitems(config, items):
    items.sort(key=_schedule)  # stable: each module's tests keep their order
