"""The architecture matrix: every engine of the gate against ``model.generate()`` on tiny models of many families.

Each architecture in ``tests/architectures.py`` is built from a config written
there (random init, fp32, 2-layer target, 1-layer draft sharing the target's first
layer).  Its reference and speculative outputs, greedy, must equal
``model.generate()`` run one prompt at a time: at batch size 1, and in one batch
of four prompts of 3 to 40 tokens with compaction forced after every step, so
sliding windows are crossed, rows accept different numbers of drafts and holes
are packed on every layer type.  An architecture the ragged layout cannot run
exactly must instead be refused, with its reason (``gate/inputs/architectures.py``).
``hf_assisted`` runs at batch size 1 where transformers supports it.

The support table in ``docs/engines.md`` is generated from this matrix:
``python tests/test_architectures.py`` rewrites it, and a test fails when it is stale.
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path

import pytest
import torch
from architectures import ARCHITECTURES, VOCAB, WINDOW, build_model, build_pair
from transformers import AutoConfig

from gate.engines.base import GenerationSettings, Request
from gate.engines.hf_assisted import HFAssistedEngine
from gate.engines.layout import RaggedBatch
from gate.engines.reference import ReferenceEngine
from gate.engines.scoring import Scorer
from gate.engines.speculative import SpeculativeEngine
from gate.engines.tolerance import measure_noise, tolerance_for
from gate.inputs.architectures import REFUSED, refusal

pytestmark = pytest.mark.slow  # about 30 s of CPU; 25 to 55 s of wall time on a shared 2-core machine

CPU = torch.device("cpu")
NEW = 16
LENGTHS = (3, 40, 17, 9)  # a mixed-length batch; 40 + 16 tokens cross an 8-token window many times
DOCS = Path(__file__).parent.parent / "docs" / "engines.md"
START = "<!-- architecture-matrix:start -->"
END = "<!-- architecture-matrix:end -->"
EXPECTED_REFUSED = {"bloom"}


def prompts(n: int = len(LENGTHS)) -> list[tuple[int, ...]]:
    g = torch.Generator().manual_seed(0)
    return [tuple(torch.randint(3, VOCAB, (k,), generator=g).tolist()) for k in LENGTHS[:n]]


def greedy(eos: tuple[int, ...] = ()) -> GenerationSettings:
    return GenerationSettings(temperature=0.0, num_draft_tokens=4, eos_token_ids=eos)


def hf_generate(model, prompt, eos=(), new=NEW) -> list[int]:
    ids = torch.tensor([list(prompt)])
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, do_sample=False,
                         eos_token_id=list(eos), pad_token_id=0)  # [] is "no EOS"; None would mean the config's
    return out[0, len(prompt):].tolist()


def each_alone(engine, ps, settings=None, new=NEW) -> list[list[int]]:
    return [engine.generate([Request(p, new)], settings or greedy()).sequences[0].token_ids for p in ps]


def one_batch(engine, ps, settings=None, new=NEW) -> list[list[int]]:
    return [s.token_ids for s in engine.generate([Request(p, new) for p in ps], settings or greedy()).sequences]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny models gain nothing from a second thread, and on a busy machine its spin-waits cost seconds."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


SHARED: list[Path] = []  # the directory every pytest-xdist worker of this session sees (set below)


@pytest.fixture(autouse=True, scope="module")
def _shared_rows(tmp_path_factory):
    """Under `make test` the matrix's rows are computed once per session, by whichever worker asks first: the
    support-table test needs every row, and the row tests may have run on another worker."""
    base = tmp_path_factory.getbasetemp()
    SHARED[:] = [(base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "architecture-matrix"]
    SHARED[0].mkdir(exist_ok=True)
    yield
    SHARED.clear()


def shared(kind: str, name: str, compute):
    """``compute()``'s JSON value, computed once per session across workers (a file under a lock)."""
    if not SHARED:  # `python tests/test_architectures.py`
        return compute()
    from filelock import FileLock

    path = SHARED[0] / f"{kind}-{name}.json"
    with FileLock(f"{path}.lock"):
        if path.exists():
            return json.loads(path.read_text())
        value = compute()
        path.write_text(json.dumps(value))
        return value


@functools.cache
def pair(name: str):
    return build_pair(name)


@functools.cache
def expected(name: str) -> tuple[tuple[int, ...], ...]:
    target, _ = pair(name)
    with torch.inference_mode():
        return tuple(tuple(hf_generate(target, p)) for p in prompts())


@functools.cache
def check(name: str) -> dict[str, str]:
    """The matrix row: for each engine, 'ok', 'refused' or what differed (the tests assert on it)."""
    return shared("row", name, lambda: _check(name))


def _check(name: str) -> dict[str, str]:
    target, draft = pair(name)
    why = refusal(target.config)
    if why:
        return {"reference": "refused", "speculative": "refused", "why": why}
    want = [list(t) for t in expected(name)]
    row = {}
    engines = {"reference": ReferenceEngine(target, CPU), "speculative": SpeculativeEngine(target, draft, CPU)}
    for label, engine in engines.items():
        alone = each_alone(engine, prompts())
        compact = (RaggedBatch.compact_min_waste, RaggedBatch.compact_ratio)
        RaggedBatch.compact_min_waste, RaggedBatch.compact_ratio = 1, 0.0  # pack holes after every step
        try:
            batched = one_batch(engine, prompts())
        finally:
            RaggedBatch.compact_min_waste, RaggedBatch.compact_ratio = compact
        bad = [f"bs 1 prompt {i}" for i, (a, b) in enumerate(zip(alone, want)) if a != b]
        bad += [f"bs 4 prompt {i}" for i, (a, b) in enumerate(zip(batched, want)) if a != b]
        row[label] = "ok" if not bad else "differs: " + ", ".join(bad)
    return row


@functools.cache
def check_assisted(name: str) -> str:
    return shared("assisted", name, lambda: _check_assisted(name))


def _check_assisted(name: str) -> str:
    target, draft = pair(name)
    engine = HFAssistedEngine(target, draft, CPU, 0)
    try:
        got = each_alone(engine, prompts(2))
    except Exception as exc:  # transformers' own limits, recorded in the table
        return f"not supported by transformers ({type(exc).__name__})"
    return "ok" if got == [list(t) for t in expected(name)[:2]] else "differs"


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_reference_and_speculative_equal_generate_or_are_refused(name):
    row = check(name)
    if name in EXPECTED_REFUSED:
        assert row["reference"] == "refused" and row["why"], row
        return
    assert row == {"reference": "ok", "speculative": "ok"}, f"{name}: {row}"


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_hf_assisted_equals_generate(name):
    assert check_assisted(name) == "ok"


def test_the_matrix_has_every_family_the_issue_names():
    families = {ARCHITECTURES[n][0] for n in ARCHITECTURES}
    assert len(ARCHITECTURES) >= 20 and {"mistral", "qwen2", "gemma2", "gemma3_text", "starcoder2", "cohere2",
                                         "bloom", "mixtral", "deepseek_v3", "phi3", "qwen3"} <= families
    sliding = [n for n in ARCHITECTURES if getattr(pair(n)[0].config, "sliding_window", None) == WINDOW
               and not refusal(pair(n)[0].config)]
    assert len(sliding) >= 6, sliding


def test_the_window_is_what_makes_sliding_architectures_exact(monkeypatch):
    """The matrix can fail: with the window left out of the mask, sliding-window models diverge."""
    from gate.engines import layout
    from gate.inputs.architectures import Attention

    real = layout.attention
    monkeypatch.setattr(layout, "attention", lambda cfg: Attention({k: None for k in real(cfg).windows}))
    for name in ("mistral_sliding", "gemma2", "qwen2_sliding"):
        target, _ = pair(name)
        assert one_batch(ReferenceEngine(target, CPU), prompts()) != [list(t) for t in expected(name)], name


def test_positions_off_by_one_after_a_hole_are_caught(monkeypatch):
    """The matrix can fail on positions too: a row with a hole (padding, a rejected draft) one position ahead."""
    right = RaggedBatch.positions

    def off_by_one(self, new_valid):
        return right(self, new_valid) + (~self.valid).any(1, keepdim=True)

    monkeypatch.setattr(RaggedBatch, "positions", off_by_one)
    for name in ("llama", "gemma2", "gemma3_text", "cohere2", "gpt2"):
        target, _ = pair(name)
        assert one_batch(ReferenceEngine(target, CPU), prompts()) != [list(t) for t in expected(name)], name


def test_the_capped_gemma2_depends_on_its_soft_cap():
    """Soft-capping is exercised only if it changes the model: turning gemma2_capped's attention cap off must
    move its logits (so a layout that lost the cap, or capped the mask, would differ from generate())."""
    target, _ = pair("gemma2_capped")
    ids = torch.tensor([list(prompts()[-1])])
    with torch.no_grad():
        capped = target(ids).logits
        layers = target.model.layers
        saved = [layer.self_attn.attn_logit_softcapping for layer in layers]
        try:
            for layer in layers:
                layer.self_attn.attn_logit_softcapping = None
            free = target(ids).logits
        finally:
            for layer, cap in zip(layers, saved):
                layer.self_attn.attn_logit_softcapping = cap
    assert (capped - free).abs().max() > 0.05


def test_the_matrix_models_do_not_just_repeat_themselves():
    """A degenerate random model (one token forever) would make every comparison pass trivially."""
    for name in set(ARCHITECTURES) - EXPECTED_REFUSED:
        outputs = expected(name)
        assert sum(len(set(o)) for o in outputs) >= 4 * len(outputs), f"{name}: {outputs}"


def test_refusals_come_from_one_list():
    assert set(REFUSED) >= EXPECTED_REFUSED
    for model_type in REFUSED:
        assert refusal(AutoConfig.for_model(model_type)) == REFUSED[model_type]

    assert "ALiBi" in refusal(AutoConfig.for_model("falcon", alibi=True))
    assert refusal(AutoConfig.for_model("falcon")) is None
    assert "linear_attention" in refusal(AutoConfig.for_model("qwen3_next"))


# --- beyond one family: EOS lists, a draft from another family, bf16 ------------------------------


def test_several_eos_ids_stop_every_engine_where_generate_stops():
    """Llama 3 style: generation_config.eos_token_id is a list; a stop on any of them ends the sequence."""
    target, draft = pair("llama")
    with torch.inference_mode():
        free = [hf_generate(target, p) for p in prompts()]
    common = sorted({t for out in free for t in out[3:10]})  # tokens met early, in some outputs only
    eos = (2, *common[:3])
    want = [hf_generate(target, p, eos) for p in prompts()]
    assert sum(out[-1] in eos[1:] for out in want) >= 2, "the test needs stops on the later EOS ids"
    for engine in (ReferenceEngine(target, CPU), SpeculativeEngine(target, draft, CPU)):
        assert one_batch(engine, prompts(), greedy(eos)) == want
        assert each_alone(engine, prompts(), greedy(eos)) == want


def test_a_draft_from_another_family_sharing_the_tokenizer():
    target, _ = pair("llama")
    draft = build_model("qwen2", 1, 3)
    engine = SpeculativeEngine(target, draft, CPU)
    assert one_batch(engine, prompts()) == [list(t) for t in expected("llama")]
    sliding_target, _ = pair("gemma2")
    engine = SpeculativeEngine(sliding_target, pair("mistral_sliding")[1], CPU)
    assert one_batch(engine, prompts()) == [list(t) for t in expected("gemma2")]


@pytest.mark.parametrize("name", ["llama", "mistral_sliding", "gemma2", "qwen2_sliding"])
def test_bf16_differences_are_near_ties_only(name):
    """In bf16 the batched reference may differ from generate(); every first difference must be a near-tie."""
    target = build_model(name, 2, 0, torch.bfloat16)
    with torch.inference_mode():
        want = [hf_generate(target, p) for p in prompts()]
    got = one_batch(ReferenceEngine(target, CPU), prompts())
    scorer = Scorer(target, CPU)
    items = [(p, tuple(o)) for p, o in zip(prompts(), got)]
    tol = tolerance_for(torch.bfloat16, measure_noise(scorer, items, 4))
    for p, ours, theirs in zip(prompts(), got, want):
        j = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
        if j is None:
            continue
        [row] = scorer.logits_rows([(p, tuple(ours[:j + 1]))], lambda _, r, j=j: r[j])
        gap = abs(float(row[ours[j]] - row[theirs[j]]))
        assert gap <= tol.at(float(row.max())), f"{name}: a confident bf16 difference at {j}: gap {gap}"


# --- the support table in docs/engines.md ----------------------------------------------------------

HOW = ("tiny random-init configs built in `tests/architectures.py` (2-layer target, 1-layer draft sharing its first "
       f"layer, vocabulary {VOCAB}, sliding windows of {WINDOW}), fp32, greedy, {len(LENGTHS)} prompts of "
       f"{min(LENGTHS)} to {max(LENGTHS)} tokens, {NEW} new tokens each, compared token for token with "
       "`model.generate()` run one prompt at a time")


def _cell(value: str) -> str:
    return {"ok": "✓ identical (bs 1 and mixed bs 4)", "refused": "refused at load (exit 2)"}.get(value, value)


def support_table() -> str:
    import transformers

    lines = [START, "",
             f"Generated by `tests/test_architectures.py` with transformers {transformers.__version__}: {HOW}. "
             "hf_assisted runs at batch size 1 only (transformers' limit).", "",
             "| architecture | model_type | what it exercises | reference | speculative | hf_assisted |",
             "|---|---|---|---|---|---|"]
    for name, (model_type, _, what) in ARCHITECTURES.items():
        row = check(name)
        assisted = check_assisted(name)
        if assisted == "ok":
            assisted = "✓ identical (bs 1)" if row["reference"] == "ok" else \
                "✓ identical in transformers (bs 1), but the gate refuses the pair: every engine is judged " \
                "against its in-process reference; gate it with `type: http`"
        lines.append(f"| {name} | `{model_type}` | {what} | {_cell(row['reference'])} | {_cell(row['speculative'])} | "
                     f"{assisted} |")
    lines += ["", "Refused at load, from `REFUSED` in `gate/inputs/architectures.py` (besides any model with "
              "`alibi: true` or a layer type other than full or sliding attention):", ""]
    lines += [f"- `{model_type}`: {why}." for model_type, why in REFUSED.items()]
    return "\n".join(lines + ["", END])


_VERSION = re.compile(r"with transformers (\S+):")


def test_support_table_in_the_docs_matches_the_matrix():
    """The table's rows must hold on the installed transformers; the version it names is only where it was made.

    A new transformers release that leaves every row as it was passes (the claim still holds); one that changes a
    row fails with both versions named, since the docs then claim something this transformers does not do.
    """
    import transformers

    text = DOCS.read_text(encoding="utf-8")
    found = re.search(re.escape(START) + ".*?" + re.escape(END), text, re.S)
    assert found, f"{DOCS}: the architecture table markers are missing"
    documented = _VERSION.search(found.group(0))
    assert documented, f"{DOCS}: the support table does not say which transformers generated it"
    fresh = support_table()
    assert _VERSION.sub("with transformers ?:", found.group(0)) == _VERSION.sub("with transformers ?:", fresh), \
        (f"{DOCS}: the support table (generated with transformers {documented.group(1)}) differs from what "
         f"transformers {transformers.__version__} does here; regenerate it with `python tests/test_architectures.py`")


if __name__ == "__main__":  # rewrite the table in docs/engines.md
    torch.set_num_threads(1)
    text = DOCS.read_text(encoding="utf-8")
    table = support_table()
    if START in text:
        text = re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: table, text, flags=re.S)
    else:
        text = text.rstrip("\n") + "\n\n" + table + "\n"
    DOCS.write_text(text, encoding="utf-8")
    print(f"wrote the support table to {DOCS}")
