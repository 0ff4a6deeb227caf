"""The process a plug-in runs in (``engines[].isolation: process``, the default).

The gate starts ``python -m gate.engines.worker RFD WFD`` with the plug-in's output (fd 1 and 2) sent to
the run's log, and talks to it over two pipes: length-prefixed pickles, one request (a batch) and one
answer at a time.  Whatever the plug-in does (``os._exit``, a segfault, a C-level abort, a hang that
never releases the GIL, printing workflow commands) stays in this process; the gate records it as a
failed execution and starts a fresh worker for the next batch.

Requests: ``("load", spec, source, sys_path)`` then ``("call", args, device)`` per batch; ``None`` ends it.
Answers: ``("ok", value)`` (a call's with the peak memory of the batch in this process: ``("ok", value,
peak_bytes)``), or ``("exc", type_name, message, out_of_memory)``; a ``load`` the gate refuses
(no such module, the wrong signature) answers ``("problems", [(message, hint), ...])``.
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import sys
import types

_LEN = struct.Struct("!Q")


def send(fh, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    fh.write(_LEN.pack(len(data)) + data)
    fh.flush()


def recv(fh):
    head = fh.read(_LEN.size)
    if len(head) < _LEN.size:
        raise EOFError("the other side closed the pipe")
    (n,) = _LEN.unpack(head)
    data = fh.read(n)
    if len(data) < n:
        raise EOFError("the other side closed the pipe mid-message")
    return pickle.loads(data)


def describe(exc: BaseException) -> tuple[str, str, bool]:
    """(type name, message, out of memory) of any exception, however broken its ``__str__``."""
    from gate.engines.base import is_out_of_memory, safe_message

    return type(exc).__name__, safe_message(exc), is_out_of_memory(exc)


def _die_with_parent() -> None:
    """Linux: SIGKILL this worker when the gate dies (a SIGKILLed gate must not leave a plug-in running)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _device(name: str):
    """What the memory counters need of the device: torch's own only for CUDA; on the CPU the process's RSS is read
    without torch (a plug-in that does not use torch never loads it)."""
    if name.startswith("cuda"):
        import torch

        return torch.device(name)
    return types.SimpleNamespace(type=name.split(":")[0])


def main(argv: list[str]) -> int:
    # Ctrl-C reaches the whole process group: the gate decides what an interrupt means, and ends this worker.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    rfh = os.fdopen(int(argv[0]), "rb")
    wfh = os.fdopen(int(argv[1]), "wb")
    fn = None
    while True:
        try:
            req = recv(rfh)
        except EOFError:
            return 0
        if req is None:
            return 0
        try:
            if req[0] == "load":
                _, spec, source, path = req
                sys.path[:0] = [p for p in path if p not in sys.path]
                from gate.engines.contract import load_callable  # torch-free: a plug-in imports what it needs
                from gate.errors import SpecguardError

                try:
                    fn = load_callable(spec, source)
                    answer = ("ok", None)
                except SpecguardError as exc:  # the plug-in's own words: not wrapped in the worker's
                    answer = ("problems", [(p.message, p.hint) for p in exc.problems])
            else:
                from gate.engines.clock import peak_memory_bytes, reset_peak_memory

                device = _device(req[2])
                reset_peak_memory(device)
                value = fn(*req[1])
                answer = ("ok", value, peak_memory_bytes(device))  # this process's peak, not the gate's
        except BaseException as exc:
            answer = ("exc", *describe(exc))
            if answer[3]:  # out of memory: free this process's CUDA cache before the next, smaller batch
                from gate.engines.clock import free_accelerator_memory

                free_accelerator_memory()
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            send(wfh, answer)
        except Exception as exc:
            send(wfh, ("exc", "ContractError", f"the return value cannot be passed to the gate: "
                       f"{describe(exc)[1]}", False))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
