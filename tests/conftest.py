"""Shared fixtures: the embedded demo pair, loaded once, offline."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest
import torch
from helpers import demo_config


@pytest.fixture(scope="session", autouse=True)
def _threads():
    torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture(scope="session")
def demo_pair():
    from gate.models import load_pair

    return load_pair(demo_config())


@pytest.fixture(scope="session")
def demo_prompts(demo_pair):
    """Prompts of very different lengths, from every slice of the default suite."""
    from gate.suite import load_suite

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
