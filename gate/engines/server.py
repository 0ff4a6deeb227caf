"""A serving stack the gate launches: its own process group, a health check until it answers (or exits, or times
out), its output in a log the errors quote, and a teardown that always runs; a port that already answers is refused
before launch, and a launched server dies with the gate (docs/serving.md)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time

import requests

from gate.engines.base import open_log, visible
from gate.errors import EngineError, Problem


def _die_with_parent() -> None:  # runs in the child before exec: if the gate dies, so does the server
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _already_listening(url: str) -> str | None:
    """host:port when a local url's port already accepts connections (a stale server from an earlier run)."""
    from urllib.parse import urlsplit

    u = urlsplit(url)
    if u.hostname not in ("127.0.0.1", "localhost", "::1", "0.0.0.0"):
        return None  # a remote or container address: nothing the gate can check from here
    port = u.port or (443 if u.scheme == "https" else 80)
    try:
        with socket.create_connection((u.hostname, port), timeout=1):
            return f"{u.hostname}:{port}"
    except OSError:
        return None


def log_tail(path, lines: int = 8, limit: int = 2000) -> str:
    """The end of a launched server's log, for the error that says why it died.

    Each line behind a ``| `` and with control characters made visible: even trimmed, no quoted line can
    start with ``::`` (a workflow command) or drive the terminal."""
    if not path:
        return ""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join("    | " + visible(line) for line in text.strip().splitlines()[-lines:])[-limit:]


def launch_env(environ, overrides: dict[str, str]) -> dict[str, str]:
    """The environment a launched server gets: the gate's, without the import paths specguard itself runs from
    (``SPECGUARD_PYTHONPATH``, set by the Action: its checkout and its dependency cache), so that ``vllm serve``
    imports its own transformers, not specguard's copy; then the endpoint's ``env:``, which wins (name
    ``PYTHONPATH`` there to give a server one of your own)."""
    env = dict(environ)
    own = {p for p in env.pop("SPECGUARD_PYTHONPATH", "").split(os.pathsep) if p}
    kept = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in own]
    if kept:
        env["PYTHONPATH"] = os.pathsep.join(kept)
    else:
        env.pop("PYTHONPATH", None)
    return {**env, **overrides}


class Server:
    """A server the gate starts in its own process group, waits on, and always tears down."""

    def __init__(self, command: list[str], url: str, health: str, timeout_s: float, env: dict[str, str],
                 label: str, log_path=None):
        self.command, self.url, self.health, self.timeout_s = command, url.rstrip("/"), health, timeout_s
        self.env, self.label, self.log_path = env, label, log_path
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Server:
        self.launch()
        return self.wait_ready()

    def launch(self) -> Server:
        """Start the process (refusing a port that already answers); :meth:`wait_ready` then waits for it.  Apart,
        so that several servers start side by side (a serving stack takes minutes to load a model)."""
        busy = _already_listening(self.url)
        if busy:  # the health check below would take that process for the one the gate launched
            raise EngineError(Problem(self.label, f"something already listens on {busy}, where the gate was to "
                                                  "launch its own server", field="url",
                                      hint="stop that process, or pick a free port in url and launch, or drop "
                                           "launch to gate the server that is running"))
        log = open_log(self.log_path) if self.log_path else subprocess.DEVNULL
        self._log = log
        try:
            self.proc = subprocess.Popen(self.command, env=launch_env(os.environ, self.env), stdout=log, stderr=log,
                                         start_new_session=True, preexec_fn=_die_with_parent)
        except OSError as exc:
            self.stop()
            raise EngineError(Problem(self.label, f"cannot start the server: {exc}", field="launch",
                                      hint="check the command and that it is installed on the runner")) from None
        self.deadline = time.monotonic() + self.timeout_s
        return self

    def wait_ready(self) -> Server:
        """Wait until the health route answers; a clear error (the server stopped) if it exits or times out."""
        while time.monotonic() < self.deadline:
            code = self.proc.poll()
            if code is not None:
                self.stop()
                tail = log_tail(self.log_path)
                raise EngineError(Problem(self.label, f"the server exited with code {code} before it was ready"
                                          + (f"; the last lines of its output:\n{tail}" if tail else ""),
                                          field="launch", hint=f"run the command by hand: {' '.join(self.command)}"
                                          + (f"; its output is in {self.log_path}" if self.log_path else "")))
            try:
                if requests.get(self.url + self.health, timeout=2).status_code < 500:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.2)
        self.stop()
        raise EngineError(Problem(self.label, f"the server did not answer {self.url}{self.health} within "
                                              f"{self.timeout_s:.0f} s", field="startup_timeout_s",
                                  hint="raise startup_timeout_s, or check the server's log"))

    def pause(self) -> None:
        """Freeze the server's whole process group (SIGSTOP): idle, a serving stack can spin on a core, and on a
        small runner that slows whatever is timed beside it (gate.run.isolation)."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        self.resume()  # a frozen group takes no SIGTERM until it runs again
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=15)
            except (ProcessLookupError, PermissionError):
                pass
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=15)
        elif self.proc is not None:  # the leader is gone; anything it left in its group goes too
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        if getattr(self, "_log", None) not in (None, subprocess.DEVNULL):
            self._log.close()

    def __exit__(self, *exc) -> None:
        self.stop()


__all__ = ["Server", "launch_env", "log_tail"]
