"""Issue 53, item 4: no traceback from `validate` or `plan`, whatever one field of a config holds.

The cases are generated from the schema itself (``Config`` and every built-in engine type's section): each field of a
known-good config gets hostile values (a wrong type, a huge number, a negative one, an empty list, an empty string,
an unknown key inside a section, null where null is not allowed; a switch flipped), one field at a time.
`validate`, `plan`, `plan --against GOOD` (the hostile config as the head) and `plan GOOD --against` it (as the
base) run in process on each.  Every one ends in exit 0 or 2 and never raises; every exit 2 names the file, the line
(which holds the field) and the dotted field; a value the schema's own types and bounds refuse is exit 2.  Two
known-good configs: the gate's own engines beside a plug-in (the gate's own engine is paired mode's head), and a
served target (an http engine, paired by its server: the path of the reported `{port}` traceback).
"""

from __future__ import annotations

import contextlib
import copy
import io
import re
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union

import annotated_types
import pytest
import yaml
from pydantic import BaseModel

from gate.cli import main
from gate.inputs.config import ENGINE_TYPES_PACKAGE, Config, engine_sections

PLUGIN = '''\
def generate(prompt_ids, batch_size, settings):
    raise NotImplementedError("the sweep only plans")
'''

LAUNCH = ["vllm", "serve", "m", "--port", "{port}"]
FULL = {
    "version": 1,
    "models": {"target": {"path": "specguard:demo/target", "dtype": "float32"},
               "draft": {"path": "specguard:demo/draft", "dtype": "float32"},
               "device": "cpu", "trust_remote_code": False, "local_weights": True, "attn_implementation": "sdpa"},
    "speculation": {"num_draft_tokens": 4},
    "batching": {"batch_sizes": [1, 2], "compositions": 1},
    "generation": {"max_new_tokens": 8, "greedy": True, "stop_at_eos": True,
                   "sampling": {"temperature": 0.8, "seed": 0, "batch_sizes": [1], "top_k": 0, "top_p": 1.0,
                                "min_p": 0.0, "truncation_order": "vllm"}},
    "suite": {"path": "specguard:suites/default.jsonl", "slices": ["code", "prose"], "max_prompts_per_slice": 1,
              "stress_mix": False, "truncate_long_prompts": False},
    "engines": [{"type": "speculative", "name": "spec"},
                {"type": "hf_assisted", "name": "assisted"},
                {"type": "plugin", "name": "inhouse", "callable": "sweep_engine:generate", "isolation": "thread",
                 "max_batch_size": 2, "extra": {"mode": "x"}, "timeout_s": 60.0, "pythonpath": ["."],
                 "reference": {"num_draft_tokens": 0}}],
    "checks": {"equivalence": {"logit_tolerance": "auto", "max_confident_divergences": 0,
                               "max_confident_inconsistencies": 0, "min_exact_match": 0.0},
               "reproducibility": {"repeat_batch_size": 2, "require_bitwise": False},
               "distribution": {"num_samples": 100, "alpha": 0.01, "power_trials": 0, "null_trials": 2000},
               "speedup": {"ci_half_width": 0.03, "time_budget_s": 60.0, "warmup": 1,
                           "min_repeats": 3, "max_repeats": 5, "max_batches_per_cell": 1,
                           "bootstrap_resamples": 200, "context_buckets": [128, 512], "calibration_trials": 3},
               "repro": {"budget_s": 0.0}},
    "baseline": {"dir": "baselines", "name": "sweep", "history": 2, "acceptance_drop": 0.05, "speedup_drop": 0.1,
                 "exact_match_drop": "auto", "hardware_key": "cpu-test", "on_missing": "neutral"},
    "output": {"dir": "out", "cache_dir": None},
    "watch": ["models/**"],
}
SERVED = {
    "version": 1,
    "models": {"target": {"path": "specguard:demo/target"}, "draft": {"path": "specguard:demo/draft"},
               "device": "cpu", "local_weights": False},
    "batching": {"batch_sizes": [1, 2], "compositions": 1},
    "generation": {"max_new_tokens": 8, "sampling": {"temperature": 1.0}},
    "suite": {"max_prompts_per_slice": 1},
    "engines": [{"type": "http", "name": "stack", "http": {
        "preset": "vllm",
        "server": {"url": "http://127.0.0.1:18000", "launch": list(LAUNCH), "health": "/health",
                   "startup_timeout_s": 60.0, "env": {"VLLM_LOGGING_LEVEL": "INFO"}, "log": "server.log"},
        "reference": {"url": "http://127.0.0.1:18001", "launch": list(LAUNCH)},
        "model": "m", "api_key_env": "SWEEP_KEY", "logprobs": 5, "request_timeout_s": 60.0, "extra_body": {"a": 1},
        "metrics": "/metrics", "counters": {}, "route": "completions"}}],
    "checks": {"traffic": {"rates": [1.0, 2.0], "arrival": "poisson", "requests": 4, "repeats": 1, "seed": 0,
                           "slo": {"ttft_s": 1.0, "tpot_s": 0.1, "e2e_s": 10.0}, "max_in_flight": 8},
               "repro": {"budget_s": 0.0}},
    "output": {"dir": "out", "cache_dir": None},
}
# Which subtrees each base sweeps: the served one only what the other lacks.
BASES = {"full": (FULL, ("",)), "served": (SERVED, ("engines", "checks.traffic", "models.local_weights"))}
UNKNOWN = "bogus_key"


# --- the schema, as the cases see it ---------------------------------------------------------------------------


def _flat(annotation: Any) -> list[Any]:
    """The alternatives an annotation accepts (Annotated and unions unwrapped)."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _flat(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return [t for a in typing.get_args(annotation) for t in _flat(a)]
    return [annotation]


def _bounds(field_info, annotation: Any) -> list[Any]:
    """The annotated-types constraints on a field: its own and its type's (Annotated[int, Field(ge=...)])."""
    out = list(field_info.metadata)
    for a in [annotation, *typing.get_args(annotation)]:
        if typing.get_origin(a) is Annotated:
            for m in typing.get_args(a)[1:]:
                out += list(getattr(m, "metadata", [])) + ([m] if isinstance(m, annotated_types.BaseMetadata) else [])
    return out


@dataclass(frozen=True)
class Field:
    path: tuple  # keys and list indices from the top of the config
    alternatives: tuple  # what the annotation accepts
    bounds: tuple

    def takes(self, *kinds) -> bool:
        return any(a in kinds or typing.get_origin(a) in kinds for a in self.alternatives)

    @property
    def strings(self) -> bool:
        return any(a is str or (typing.get_origin(a) is Literal and any(isinstance(x, str) for x in
                                                                         typing.get_args(a)))
                   for a in self.alternatives)

    @property
    def numeric(self) -> bool:
        return self.takes(int, float)

    @property
    def nullable(self) -> bool:
        return self.takes(type(None))

    @property
    def non_negative(self) -> bool:
        return any(isinstance(b, (annotated_types.Ge, annotated_types.Gt)) and
                   (getattr(b, "ge", None) or getattr(b, "gt", None) or 0) >= 0 for b in self.bounds)

    @property
    def nonempty(self) -> bool:
        return any(isinstance(b, annotated_types.MinLen) and b.min_length >= 1 for b in self.bounds)

    @property
    def list_of_numbers(self) -> bool:
        return any(typing.get_origin(a) is list and any(t in (int, float) for t in _flat(typing.get_args(a)[0]))
                   for a in self.alternatives)


def _sections(annotation: Any) -> list[type[BaseModel]]:
    return [a for a in _flat(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]


def fields(model: type[BaseModel], node: Any, path: tuple = ()) -> typing.Iterator[tuple[Field | None, tuple]]:
    """Every field of ``model`` under ``path`` (a section present in the base is walked into), and each section
    present as (None, its path), where an unknown key goes."""
    yield None, path
    for name, info in model.model_fields.items():
        here = (*path, name)
        yield Field(here, tuple(_flat(info.annotation)), tuple(_bounds(info, info.annotation))), None
        value = node.get(name) if isinstance(node, dict) else None
        if name == "engines" and model is Config:
            builtin = {t: s for t, s in engine_sections().items() if s.__module__.startswith(ENGINE_TYPES_PACKAGE)}
            for i, entry in enumerate(value or []):
                yield from fields(builtin[entry["type"]], entry, (*here, i))
            continue
        for section in _sections(info.annotation):
            if isinstance(value, dict):
                yield from fields(section, value, here)


@dataclass(frozen=True)
class Case:
    base: str
    path: tuple
    value: Any
    kind: str
    invalid: bool  # the schema's own types and bounds refuse it: exit 2, naming the field

    @property
    def id(self) -> str:
        return f"{self.base}:{dotted(self.path)}:{self.kind}"


def dotted(path: tuple) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def current(doc: dict, path: tuple, default: Any = False) -> Any:
    node = doc
    for part in path:
        if not isinstance(node, (dict, list)) or (isinstance(node, dict) and part not in node):
            return default
        node = node[part]
    return node


def cases_of(base: str, doc: dict, prefixes: tuple[str, ...]) -> list[Case]:
    out = []
    for f, section in fields(Config, doc):
        path = f.path if f is not None else section
        if not any(dotted(path).startswith(p) for p in prefixes):
            continue
        if f is None:
            out.append(Case(base, (*section, UNKNOWN), 1, "unknown key", True))
            continue
        out.append(Case(base, f.path, {"hostile": [1]} if f.strings else "hostile", "wrong type", True))
        if f.numeric:
            out.append(Case(base, f.path, 10**30, "huge", True))
            out.append(Case(base, f.path, -1, "negative", f.non_negative))
        if f.takes(list):
            out.append(Case(base, f.path, [], "empty list", f.nonempty))
            if f.list_of_numbers:
                out.append(Case(base, f.path, [10**30], "huge element", True))
        if f.strings:
            out.append(Case(base, f.path, "", "empty string", False))
        if not f.nullable:
            out.append(Case(base, f.path, None, "null", True))
        if f.takes(bool):  # a legal value, and the other one: what the rest of the config (or --against) allows
            out.append(Case(base, f.path, not current(doc, f.path), "flipped", False))
    return out


CASES = [c for name, (doc, prefixes) in BASES.items() for c in cases_of(name, doc, prefixes)]


def applied(case: Case) -> dict:
    doc = copy.deepcopy(BASES[case.base][0])
    node = doc
    for part in case.path[:-1]:
        node = node[part]
    node[case.path[-1]] = case.value
    return doc


# --- the commands ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("sweep")
    (d / "sweep_engine.py").write_text(PLUGIN)
    for name, (doc, _) in BASES.items():
        (d / f"{name}.yaml").write_text(text_of(doc))
    return d


def text_of(doc: dict) -> str:
    return yaml.dump(doc, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), default_flow_style=None,
                     sort_keys=False, width=10_000)


def run(argv: list[str]) -> tuple[int, str]:
    """The CLI in this process: its exit code and what it printed; an exception is the traceback a user would see."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue() + err.getvalue()


ERROR = re.compile(r"^(?:error: )?(?P<file>[^\s:]+):(?P<line>\d+): (?P<field>[^\s:]+): (?P<message>.*)$")


def names(said: str, file: str, text: str, path: tuple) -> bool:
    """An error line names ``file``, a line that holds the field, and the field itself (or a field inside it; or the
    section it is checked in, with its name in the message)."""
    want, leaf = dotted(path), str(path[-1])
    lines = text.splitlines()
    for line in said.splitlines():
        m = ERROR.match(line)
        if m is None or m["file"] != file:
            continue
        f = m["field"]
        related = f == want or f.startswith((want + ".", want + "[")) or (
            want.startswith((f + ".", f + "[")) and leaf in m["message"])
        n = int(m["line"])
        shown = re.sub(r"\[\d+\]$", "", f).rsplit(".", 1)[-1]
        if related and 1 <= n <= len(lines) and (shown in lines[n - 1] or lines[n - 1].lstrip().startswith("-")):
            return True
    return False


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_hostile_value_is_exit_2_naming_the_field_or_fine_and_never_a_traceback(folder, case):
    hostile = folder / f"{case.base}-case.yaml"
    text = text_of(applied(case))
    hostile.write_text(text)
    good = str(folder / f"{case.base}.yaml")
    for argv in (["validate", str(hostile)], ["plan", str(hostile)], ["plan", str(hostile), "--against", good],
                 ["plan", good, "--against", str(hostile)]):
        code, said = run(argv)  # an exception here is the traceback the user would have seen
        assert code in (0, 2), (argv, code, said)
        if case.invalid:
            assert code == 2, (argv, code, said)
        if code == 2:
            assert names(said, str(hostile), text, case.path), (argv, said)


def test_the_sweep_covers_every_builtin_engine_type_and_its_bases_are_good(folder):
    """Each engine type's section is swept (a new built-in type must join a base), from bases that pass."""
    swept = {BASES[c.base][0]["engines"][c.path[1]]["type"] for c in CASES
             if c.path[0] == "engines" and len(c.path) > 2}
    builtin = {t for t, s in engine_sections().items() if s.__module__.startswith(ENGINE_TYPES_PACKAGE)}
    assert builtin <= swept, builtin - swept
    for name in BASES:
        assert run(["validate", str(folder / f"{name}.yaml")])[0] == 0
