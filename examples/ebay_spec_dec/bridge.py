"""The eBay/spec_dec side of the plug-in: runs in eBay's own venv (torch 2.13.0+cpu, transformers 4.51.3), never in
the gate's.  ``ebay_engine.py`` starts it once per worker and talks JSON lines to it:

    in:  {"batcher": "eqspec"|"bsp"|"dsd"|"standard", "prompts": [[ids], ...], "max_new_tokens": int, "k": int,
          "target": path, "draft": path, "dtype": "float32", "threads": int}
    out: {"rows": [[ids], ...], "wall_s": float}   or   {"error": "...", "traceback": "..."}

Nothing of eBay's is copied here: their modules are imported from the checkout named on the command line
(``python bridge.py /path/to/spec_dec``) and their batch functions are called as their own benchmark
(unified_benchmark.py) calls them, one call per gate batch, with ``batch_size`` = the batch's size.

Two things stand between their functions and the gate's token ids, both in this file, neither in theirs:

- ``torch.cuda.synchronize`` (called unconditionally by their timing code) is a no-op here: a CPU has nothing to
  synchronise.  ``torch.cuda.empty_cache`` likewise.
- Their functions take prompt *text* and a tokenizer.  The tokenizer handed to them is the target's own
  (pad / EOS ids, padding side), with ``__call__`` answering each prompt handle with the gate's exact token ids and
  ``decode`` returning the ids it is given as JSON, so no text round trip touches a prompt or an output.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time
import traceback


def _protocol_out():
    """Keep the real stdout for the protocol; everything their code prints (tqdm, progress lines) goes to stderr,
    which the gate files as the engine's log."""
    fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(fd, "w", buffering=1)


OUT = _protocol_out()

SPEC_DEC = sys.argv[1]
sys.path.insert(0, SPEC_DEC)

import torch  # noqa: E402

torch.cuda.synchronize = lambda *a, **k: None  # CPU: nothing to synchronise (their timing calls it unconditionally)
torch.cuda.empty_cache = lambda *a, **k: None

from src.baselines.bsp import run_adaptive_speculative_inference  # noqa: E402
from src.baselines.dsd import run_dsd_inference  # noqa: E402
from src.baselines.inference import run_standard_inference  # noqa: E402
from src.custom.batch_speculative import run_speculative_inference  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaTokenizerFast  # noqa: E402
from transformers.tokenization_utils_base import BatchEncoding  # noqa: E402

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "auto": torch.float32}
_MODELS: dict[tuple[str, str], torch.nn.Module] = {}
LOG = sys.stderr


def _model(path: str, dtype: str):
    if (path, dtype) not in _MODELS:
        _MODELS[path, dtype] = AutoModelForCausalLM.from_pretrained(path, torch_dtype=_DTYPES[dtype]).eval()
    return _MODELS[path, dtype]


_TOKENIZERS: dict[str, object] = {}


def _base_tokenizer(path: str):
    if path not in _TOKENIZERS:
        _TOKENIZERS[path] = _load_tokenizer(path)
    return copy.deepcopy(_TOKENIZERS[path])


def _load_tokenizer(path: str):
    """The target's tokenizer as their setup_models() loads it (AutoTokenizer, pad = EOS when there is none).  The
    demo's tokenizer_config names transformers 5's ``TokenizersBackend``, which 4.51.3 does not know; the class
    AutoTokenizer picks for a llama model, LlamaTokenizerFast, is then built from the same tokenizer.json and
    special tokens."""
    try:
        tok = AutoTokenizer.from_pretrained(path)
    except ValueError as exc:
        print(f"[bridge] AutoTokenizer: {exc}; using LlamaTokenizerFast from tokenizer.json", file=LOG)
        with open(os.path.join(path, "tokenizer_config.json")) as fh:
            cfg = json.load(fh)
        special = {k: cfg[k] for k in ("bos_token", "eos_token", "pad_token", "unk_token") if cfg.get(k)}
        tok = LlamaTokenizerFast(tokenizer_file=os.path.join(path, "tokenizer.json"), **special)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def _id_tokenizer(path: str, prompts: list[list[int]]):
    """A fresh tokenizer per call (BSP sets ``padding_side`` on the one it is given), whose text is a handle."""
    tok = _base_tokenizer(path)
    base = type(tok)
    table = {f"<specguard prompt {i}>": list(p) for i, p in enumerate(prompts)}

    class IdTokenizer(base):
        def __call__(self, text, return_tensors=None, padding=False, truncation=False, max_length=None, **kw):
            single = isinstance(text, str)
            ids = [list(table[t]) for t in ([text] if single else text)]
            if truncation and max_length is not None:
                for i, x in enumerate(ids):
                    if len(x) > max_length:
                        print(f"[bridge] their max_input_len={max_length} truncates a {len(x)}-token prompt", file=LOG)
                        ids[i] = x[:max_length] if self.truncation_side == "right" else x[-max_length:]
            enc = BatchEncoding({"input_ids": ids, "attention_mask": [[1] * len(x) for x in ids]})
            if padding:
                return self.pad(enc, padding=True, return_tensors=return_tensors)
            if single:
                enc = BatchEncoding({k: v[0] for k, v in enc.items()})
            return BatchEncoding(enc.data, tensor_type=return_tensors)

        def decode(self, token_ids, skip_special_tokens=False, **kw):
            return json.dumps([int(t) for t in token_ids])

        def encode(self, text, add_special_tokens=False, **kw):  # BSP's wrapper re-encodes outputs to count them
            return json.loads(text)

    tok.__class__ = IdTokenizer
    return tok, list(table)


def _run(req: dict) -> dict:
    torch.set_num_threads(int(req.get("threads") or torch.get_num_threads()))
    batcher, k, m = req["batcher"], int(req["k"]), int(req["max_new_tokens"])
    target = _model(req["target"], req.get("dtype", "float32"))
    tok, handles = _id_tokenizer(req["target"], req["prompts"])
    n = len(handles)
    start = time.perf_counter()
    with torch.no_grad():
        if batcher == "eqspec":
            draft = _model(req["draft"], req.get("draft_dtype", "float32"))
            texts = run_speculative_inference(target, draft, tok, handles, max_new_tokens=m, batch_size=n,
                                              n_draft_tokens=k, device="cpu", use_cache=True)[0]
        elif batcher == "dsd":
            draft = _model(req["draft"], req.get("draft_dtype", "float32"))
            texts = run_dsd_inference(target, draft, tok, handles, max_new_tokens=m, batch_size=n,
                                      n_draft_tokens=k, device="cpu")[0]
        elif batcher == "bsp":
            draft = _model(req["draft"], req.get("draft_dtype", "float32"))
            texts = run_adaptive_speculative_inference(target, draft, tok, handles, max_new_tokens=m, device="cpu",
                                                       n_draft_tokens=k, batch_size=n)[0]
        elif batcher == "standard":
            texts = run_standard_inference(target, tok, handles, max_new_tokens=m, batch_size=n, device="cpu")[0]
        else:
            raise ValueError(f"unknown batcher {batcher!r} (eqspec, bsp, dsd, standard)")
    wall = time.perf_counter() - start
    return {"rows": [json.loads(t) for t in texts], "wall_s": wall}


def main() -> None:
    OUT.write(json.dumps({"ready": True, "torch": torch.__version__,
                          "transformers": __import__("transformers").__version__}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            reply = _run(json.loads(line))
        except Exception as exc:  # the plug-in raises it in the gate's worker, with this text
            reply = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        OUT.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    main()
