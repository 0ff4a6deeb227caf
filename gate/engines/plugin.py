"""Gate an in-house engine: a Python callable named in the config.

The contract (``docs/engines.md`` has the full text and ``examples/`` a worked
example)::

    def generate(prompt_ids: list[list[int]], batch_size: int,
                 settings: gate.engines.plugin.PluginSettings) -> list[dict | SequenceResult]

``prompt_ids`` is one batch of exactly ``batch_size`` prompts (the load level
being measured).  Return one result per prompt, in order, each with at
least ``token_ids``.  Structural problems (wrong count, missing fields, wrong
types, token ids outside the vocabulary, unknown counters) and crashes,
``sys.exit`` and hangs (``engines[].timeout_s``) are recorded as failed
executions that name the engine, the batch and the field: findings about the
engine, not errors of the gate.  Behavioural problems (too many tokens, text
after EOS) are left for the checks to find.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import threading
from dataclasses import replace
from pathlib import Path

import torch

from gate.engines.base import (
    PRECISIONS,
    BatchResult,
    EngineFailure,
    GenerationSettings,
    Request,
    SequenceResult,
    SpecCounters,
    open_log,
    precision_name,
)
from gate.engines.clock import Clock, peak_memory_bytes, reset_peak_memory
from gate.engines.contract import ENTRY_POINT_GROUP, PluginSettings, capabilities_for, load_callable  # noqa: F401 (re-exported)
from gate.engines.tracking import check_requests
from gate.errors import EngineError, Problem, SpecguardError

COUNTER_LISTS = ("num_accepted_tokens_per_pos", "num_draft_tokens_per_pos")


def _is_count(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 0


def _counters(counters, i: int, src: str) -> SpecCounters | None:
    if counters is None:
        return None
    if not isinstance(counters, dict):
        raise EngineError(Problem(src, f"expected a dict of speculation counters, got {type(counters).__name__}",
                                  field=f"result[{i}].counters"))
    known = set(SpecCounters.__dataclass_fields__)
    for key, v in counters.items():
        field = f"result[{i}].counters.{key}"
        if key not in known:
            # Derived figures a plug-in may echo back are ignored; anything else is a typo to report.
            if key in ("acceptance_rate", "mean_accepted_length", "acceptance_per_pos", "tokens_per_target_forward"):
                continue
            raise EngineError(Problem(src, f"unknown counter {key!r}", field=field,
                                      hint=f"known counters: {', '.join(sorted(known))}"))
        if key in COUNTER_LISTS:
            if not isinstance(v, (list, tuple)) or not all(_is_count(x) for x in v):
                raise EngineError(Problem(src, f"expected a list of counts (ints >= 0), got {v!r}"[:200], field=field))
        elif not _is_count(v):
            raise EngineError(Problem(src, f"expected a count (an int >= 0), got {v!r}"[:200], field=field))
    return SpecCounters(**{k: (list(v) if k in COUNTER_LISTS else int(v)) for k, v in counters.items() if k in known})


def _as_result(obj, i: int, label: str, settings: PluginSettings, vocab_size: int | None = None) -> SequenceResult:
    src = f"engine {label!r}"
    if isinstance(obj, SequenceResult):
        obj = obj.to_dict()
    if not isinstance(obj, dict):
        raise EngineError(Problem(src, f"expected a dict or SequenceResult, got {type(obj).__name__}",
                                  field=f"result[{i}]"))
    toks = obj.get("token_ids")
    if not isinstance(toks, (list, tuple)) or not all(_is_count(t) for t in toks):
        raise EngineError(Problem(src, "expected a list of token ids (ints >= 0, not bools)",
                                  field=f"result[{i}].token_ids"))
    if vocab_size is not None:
        bad = next((j for j, t in enumerate(toks) if t >= vocab_size), None)
        if bad is not None:
            raise EngineError(Problem(src, f"token id {toks[bad]} is outside the target's vocabulary "
                                           f"(size {vocab_size})", field=f"result[{i}].token_ids[{bad}]"))
    stop = obj.get("stop_reason")
    if stop is None:
        stop = "eos" if toks and toks[-1] in settings.eos_token_ids else "max_tokens"
    if stop not in ("eos", "max_tokens"):
        raise EngineError(Problem(src, f"expected 'eos' or 'max_tokens', got {stop!r}"[:200],
                                  field=f"result[{i}].stop_reason"))
    num = {}
    for key in ("wall_s", "ttft_s", "per_token_s"):
        v = obj.get(key)
        if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v)
                              or v < 0):
            raise EngineError(Problem(src, f"expected seconds as a number >= 0, got {v!r}"[:200],
                                      field=f"result[{i}].{key}"))
        num[key] = v
    precision = obj.get("precision")
    if precision is not None and precision_name(precision) is None:
        raise EngineError(Problem(src, f"unknown precision {precision!r}"[:200], field=f"result[{i}].precision",
                                  hint=f"one of {', '.join(sorted(set(PRECISIONS)))} (what the engine computes in)"))
    return SequenceResult([int(t) for t in toks], stop, wall_s=num["wall_s"] or 0.0, ttft_s=num["ttft_s"],
                          per_token_s=num["per_token_s"], counters=_counters(obj.get("counters"), i, src),
                          precision=precision_name(precision) if precision is not None else None)


def call_with_deadline(fn, args: tuple, timeout_s: float | None, label: str):
    """Run a plug-in call in a worker thread, so that a hung call gives control back to the gate.

    Anything the call raises (SystemExit included) is raised here, in the gate's thread, for the
    executor to record; a call still running after ``timeout_s`` is abandoned (its daemon thread
    ends with the process).
    """
    box: dict = {}

    def target():
        try:
            box["out"] = fn(*args)
        except BaseException as exc:  # SystemExit and KeyboardInterrupt from plug-in code are crashes too
            box["exc"] = exc

    worker = threading.Thread(target=target, name=f"specguard-engine-{label}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise EngineFailure("timeout", "Timeout", f"engine {label!r} timed out after {timeout_s:.0f} s "
                                                  "(engines[].timeout_s)")
    if "exc" in box:
        exc = box["exc"]
        if isinstance(exc, KeyboardInterrupt):  # raised by the plug-in itself, not by a person: a crash
            raise EngineFailure("crash", "KeyboardInterrupt", str(exc) or "raised by the engine") from exc
        raise exc  # the executor records it (an out-of-memory error as such)
    return box["out"]


# The worker's entry: not `-m gate.engines.worker`, which puts the working directory (a model repository, in the
# Action) first on sys.path, where its own gate.py or gate/ would be imported instead of specguard's.
# (run as `-m` would run it, so that __main__ is the worker module, as a plug-in may check)
WORKER_MAIN = ("import runpy, sys; sys.path.pop(0); "
               "runpy.run_module('gate.engines.worker', run_name='__main__', alter_sys=True)")


def load_in_process(spec: str, source: str, roots: list) -> object:
    """``isolation: thread``: the callable imported in the gate's own process, its import roots first."""
    import sys

    sys.path[:0] = [str(r) for r in roots if str(r) not in sys.path]
    return load_callable(spec, source)


class ProcessCallable:
    """A plug-in callable run in its own worker process (:mod:`gate.engines.worker`): the isolation default.

    ``os._exit``, a segfault or a C-level abort in plug-in code ends the worker, not the gate: the batch is
    a recorded crash and the next batch starts a fresh worker.  A call past its deadline is ended by killing
    the worker, which also stops code that never releases the GIL.  The plug-in's stdout and stderr go to
    ``log_path``, never to the gate's own output (so it cannot issue workflow commands).
    """

    def __init__(self, spec: str, source: str, label: str, log_path=None, roots: list | None = None):
        self.spec = spec
        self.source = source
        self.label = label
        self.log_path = log_path
        self.roots = [str(r) for r in (roots or [])]  # where the plug-in's modules import from, first
        self._proc = None
        self._pipes = None
        self._registered = False
        self.last_peak_memory_bytes = None

    def start(self) -> None:
        """Start the worker and import the plug-in in it (what a first batch would otherwise pay for)."""
        import os
        import subprocess
        import sys
        import tempfile
        from pathlib import Path

        if self._proc is not None and self._proc.poll() is None:
            return
        self.stop()
        if not self._registered:
            import atexit

            atexit.register(self.stop)
            self._registered = True
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix=f"specguard-{self.label}-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        log = open_log(Path(self.log_path))
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        try:
            root = str(Path(__file__).resolve().parents[2])
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get(
                "PYTHONPATH")])]), "PYTHONUNBUFFERED": "1"}
            self._proc = subprocess.Popen(
                [sys.executable, "-c", WORKER_MAIN, str(to_child_r), str(from_child_w)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(to_child_r, from_child_w), env=env,
                start_new_session=False)
        finally:
            log.close()
            os.close(to_child_r)
            os.close(from_child_w)
        self._pipes = (os.fdopen(to_child_w, "wb"), os.fdopen(from_child_r, "rb"))
        reply = self._ask(("load", self.spec, self.source, self.roots + list(sys.path)), timeout_s=600.0)
        if reply[0] == "problems":
            self.stop()
            raise EngineError([Problem(self.source, message, field="engines[].callable", hint=hint)
                               for message, hint in reply[1]])
        if reply[0] != "ok":
            self.stop()
            raise EngineError(Problem(self.source, f"the plug-in {self.spec!r} does not load in its worker process: "
                                      f"{reply[1]}: {reply[2]}", field="engines[].callable",
                                      hint=f"its output is in {self.log_path}"))

    def stop(self) -> None:
        proc, pipes = self._proc, self._pipes
        self._proc = self._pipes = None
        if pipes:
            for fh in pipes:
                with contextlib.suppress(OSError):
                    fh.close()
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def _ask(self, request, timeout_s: float | None):
        import select
        import time

        from gate.engines.worker import recv, send

        to_child, from_child = self._pipes
        with contextlib.suppress(OSError):  # the worker is gone: the read below says how
            send(to_child, request)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([from_child], [], [], left)
            if ready:
                break
            if deadline is not None and time.monotonic() >= deadline:
                self.stop()  # the only way to stop code that may never release the GIL
                raise EngineFailure("timeout", "Timeout", f"engine {self.label!r} timed out after {timeout_s:.0f} s "
                                                          "(engines[].timeout_s); its process was ended")
        try:
            return recv(from_child)
        except (EOFError, OSError):
            proc = self._proc
            code = proc.wait() if proc is not None else None
            self.stop()
            raise EngineFailure("crash", "ProcessExit", f"engine {self.label!r}'s process {_exit_words(code)} "
                                                        f"without answering (its output: {self.log_path})") from None

    def __call__(self, args: tuple, timeout_s: float | None, device: str = "cpu"):
        """The plug-in's return value; ``last_peak_memory_bytes`` is then the batch's peak in the worker."""
        self.start()
        self.last_peak_memory_bytes = None
        try:
            reply = self._ask(("call", args, device), timeout_s)
        except BaseException:  # an interrupt mid-call: the worker's answer would answer the next call
            self.stop()
            raise
        if reply[0] == "ok":
            self.last_peak_memory_bytes = reply[2]
            return reply[1]
        _, type_, message, oom = reply
        if oom:
            raise EngineFailure("out_of_memory", type_, message)
        raise EngineFailure("contract" if type_ == "ContractError" else "crash", type_, message)


def _exit_words(code: int | None) -> str:
    import signal

    if code is None:
        return "ended"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def default_timeout_s(requests: list[Request]) -> float:
    """A per-batch limit from the token budget: a minute, plus a second per token the batch may generate."""
    return 60.0 + sum(r.max_new_tokens for r in requests)


class PluginEngine:
    speculative = True

    def __init__(self, name: str, fn, device: torch.device, base: PluginSettings,
                 max_batch_size: int | None = None, vocab_size: int | None = None, timeout_s: float | None = None):
        self.name = name
        self.fn = fn
        self.device = device
        self.base = base
        self.vocab_size = vocab_size
        self.timeout_s = timeout_s
        self.capabilities = capabilities_for(max_batch_size)

    def generate(self, requests: list[Request], settings: GenerationSettings) -> BatchResult:
        check_requests(requests)
        plug = PluginSettings(
            max_new_tokens=[r.max_new_tokens for r in requests], seeds=[r.seed for r in requests],
            temperature=settings.temperature, num_draft_tokens=settings.num_draft_tokens,
            eos_token_ids=list(settings.eos_token_ids), target=self.base.target, draft=self.base.draft,
            dtype=self.base.dtype, device=self.base.device, draft_dtype=self.base.draft_dtype,
            extra=dict(self.base.extra), top_k=settings.top_k, top_p=settings.top_p, min_p=settings.min_p,
            order=settings.order,
        )
        clock = Clock(self.device)
        reset_peak_memory(self.device)
        start = clock.now()
        timeout = self.timeout_s or default_timeout_s(requests)
        args = ([list(r.prompt_ids) for r in requests], len(requests), plug)
        if isinstance(self.fn, ProcessCallable):
            self.fn.start()  # a fresh worker after a crash is not part of this batch's time
            start = clock.now()
            out = self.fn(args, timeout, str(self.device))
            peak = self.fn.last_peak_memory_bytes  # the worker's: the gate's own process holds no plug-in memory
        else:
            out = call_with_deadline(self.fn, args, timeout, self.name)
            peak = None
        wall = clock.now() - start
        try:
            if not isinstance(out, (list, tuple)) or len(out) != len(requests):
                got = len(out) if isinstance(out, (list, tuple)) else type(out).__name__
                raise EngineError(Problem(f"engine {self.name!r}", f"expected {len(requests)} results, got {got}",
                                          field="return value", hint="return one result per prompt, in order"))
            seqs = [_as_result(o, i, self.name, plug, self.vocab_size) for i, o in enumerate(out)]
        except EngineError as exc:  # the engine under test broke the contract: a finding, recorded as such
            raise EngineFailure("contract", "ContractError", "; ".join(str(p) for p in exc.problems)) from None
        for s in seqs:
            if not s.wall_s:
                s.wall_s = wall
        return BatchResult(seqs, wall_s=wall,
                           peak_memory_bytes=peak if peak is not None else peak_memory_bytes(self.device))


class SpeculationOff:
    """A plug-in's own plain decoding (``reference: {num_draft_tokens: 0}``): the same engine, called with
    ``settings.num_draft_tokens = 0``.  Timed beside the plug-in on the same batches, so that its speedup is
    against its own stack rather than the gate's torch reference; never judged for equivalence."""

    speculative = False

    def __init__(self, engine: PluginEngine, name: str):
        self.engine = engine
        self.name = name
        self.capabilities = engine.capabilities

    def generate(self, requests: list[Request], settings: GenerationSettings) -> BatchResult:
        return self.engine.generate(requests, replace(settings, num_draft_tokens=0))


def check_callable(loaded, spec, target: str, name: str, where: str, what: str, log_dir=None,
                   started: dict | None = None) -> list:
    """Import a plug-in's callable ``target`` (in its own worker unless the plug-in runs in a thread) and check its
    signature (or that its entry point exists).  A worker that loaded is kept in ``started`` under ``name`` for the
    run to use; without ``started`` it is stopped."""
    problems: list = []
    try:
        if not spec.in_worker:
            load_in_process(target, str(loaded.source), loaded.import_roots(spec))
            return problems
        fn = _start_worker(target, name, loaded, spec, log_dir, where, what, problems)
        if fn is not None and started is None:
            fn.stop()
        elif fn is not None:
            started[name] = fn
    except SpecguardError as exc:
        problems += [Problem(p.source, p.message, field=where, hint=p.hint) for p in exc.problems]
    return problems


def _start_worker(spec: str, name: str, loaded, e, log_dir, where: str, what: str,
                  problems: list) -> ProcessCallable | None:
    """A worker that imported ``spec``, or None with the problem recorded (its log kept only if it says something)."""
    fn = ProcessCallable(spec, str(loaded.source), name, log_path=Path(log_dir) / f"{name}.log" if log_dir else None,
                         roots=loaded.import_roots(e))
    try:
        fn.start()
    except (EngineFailure, SpecguardError) as exc:
        said = _keep_log_if_written(Path(fn.log_path))  # a refused run adds no empty log to OUT
        if isinstance(exc, SpecguardError):
            raise
        problems.append(Problem(str(loaded.source), f"{what} {spec!r} does not load: {exc.message}", field=where,
                                hint=f"its output is in {fn.log_path}" if said else "import it by hand to see why"))
        return None
    return fn


def _keep_log_if_written(log: Path) -> bool:
    """True when the log holds output; an empty one is removed."""
    if log.is_file() and log.stat().st_size > 0:
        return True
    log.unlink(missing_ok=True)
    return False
