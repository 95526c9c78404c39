"""One persistent reward worker process, killable on a wall-clock deadline.

Why a process and not a thread or ``signal.alarm``: symbolic checks (sympy via
math-verify) can run for minutes or exhaust memory on adversarial answers, a Python
thread cannot be stopped, and ``signal.alarm`` only works on the main thread of the main
interpreter. A child process can always be killed; the parent measures the deadline with
``Connection.poll`` and, on expiry, kills the child and starts a fresh one.

The child is a fresh interpreter (``python -m llamarl_core.rewards.worker_entry``) joined
to the parent by a socket pair wrapped in ``multiprocessing.connection.Connection``. Not
``multiprocessing.Process``: its spawn/forkserver contexts re-import the caller's
``__main__`` (a script without an ``if __name__ == "__main__"`` guard would start itself
again), and fork would copy threads, CUDA state and process-group sockets. A fresh
interpreter inherits none of that, so it is safe to start inside a torchrun worker.
Protocol: child sends ``("ready", info)`` once warmed up (``info["batch"]``: a custom reward
that takes lists), then for each ``(task_id, args)`` it replies ``(task_id, score,
error_or_None)``: ``isolated(*args)`` for a built-in; for a custom reward ``args`` is
``(completion, example)`` (or two lists, and the score a list) and the error its traceback.
"""
from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection

from llamarl_core.rewards.custom import load_function
from llamarl_core.rewards.specs import get_spec

WORKER_MEMORY_LIMIT_BYTES = 4 * 1024**3  # a runaway sympy expansion dies, not the machine
MAX_TRACEBACK_CHARS = 4000  # a custom reward's traceback, as sent to the reward log


def worker_main(conn: Connection, reward_name: str, parent_is_main_thread: bool) -> None:
    """Entry point of the child process: warm up, then answer tasks until EOF or None."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent owns Ctrl-C and shutdown
    _die_with_parent(parent_is_main_thread)
    spec = get_spec(reward_name)
    if not spec.custom:  # a user's reward may legitimately need memory (a judge model, torch)
        try:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_LIMIT_BYTES,) * 2)
        except (ImportError, ValueError, OSError):
            pass
    import logging

    logging.disable(logging.WARNING)  # math-verify warns once that its timeouts are off
    if spec.custom:
        fn = load_function(reward_name)
        batch = bool(getattr(fn, "batch", False))
        call = _batch_call(fn) if batch else _one_call(fn)
        info = {"batch": batch}
    else:
        call, info = (lambda *args: float(spec.isolated(*args))), {}
        if spec.warm_up is not None:
            spec.warm_up()
    conn.send(("ready", info))
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        task_id, args = task
        try:
            score, error = call(*args), None
        except Exception as exc:  # noqa: BLE001 - a verifier error scores 0, never kills
            score = 0.0
            error = (traceback.format_exc()[-MAX_TRACEBACK_CHARS:] if spec.custom
                     else f"{type(exc).__name__}: {str(exc)[:200]}")
        conn.send((task_id, score, error))


def _finite(value) -> float:
    score = float(value)
    if not math.isfinite(score):
        raise ValueError(f"the reward returned {value!r}, not a finite number")
    return score


def _one_call(fn):
    return lambda completion, example: _finite(fn(completion, example))


def _batch_call(fn):
    def call(completions: list, examples: list) -> list[float]:
        values = list(fn(completions, examples))
        if len(values) != len(completions):
            raise ValueError(f"a batch=True reward returned {len(values)} scores for "
                             f"{len(completions)} completions")
        return [_finite(v) for v in values]
    return call


def _die_with_parent(parent_is_main_thread: bool, poll_s: float = 1.0) -> None:
    """Exit when the parent process is gone, even in the middle of a long computation.

    Linux ``PR_SET_PDEATHSIG`` kills the worker even inside one long C call (a huge
    integer power holds the GIL), but it fires when the parent *thread* that started the
    worker exits, so it is used only when that thread was the main thread. Always, a
    daemon thread also polls ``os.getppid()`` (it runs between bytecodes).
    """
    parent_pid = os.getppid()
    if parent_is_main_thread:
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(0)

    def watch() -> None:
        while True:
            time.sleep(poll_s)
            if os.getppid() != parent_pid:
                os._exit(0)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


class WorkerHandle:
    """Parent-side handle: start, wait until ready, run one task with a deadline, kill."""

    def __init__(self, reward_name: str, startup_timeout_s: float = 120.0) -> None:
        self.reward_name = reward_name
        self.startup_timeout_s = startup_timeout_s
        self.process: subprocess.Popen | None = None
        self.conn: Connection | None = None
        self.ready = False
        self.start()

    def start(self) -> None:
        parent_sock, child_sock = socket.socketpair()
        child_fd = child_sock.fileno()
        on_main_thread = threading.current_thread() is threading.main_thread()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "llamarl_core.rewards.worker_entry", str(child_fd),
             self.reward_name, str(int(on_main_thread))],
            pass_fds=(child_fd,), stdin=subprocess.DEVNULL, close_fds=True,
        )
        child_sock.close()
        self.conn, self.ready, self.info = Connection(parent_sock.detach()), False, {}

    def is_alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_ready(self) -> None:
        """Block until the child has imported and warmed up its verifier."""
        if self.ready:
            return
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.conn.poll(0.05):
                try:
                    message = self.conn.recv()
                except EOFError:
                    break
                if message[0] == "ready":
                    self.ready, self.info = True, dict(message[1] or {})
                    return
            if not self.is_alive() and not self.conn.poll(0):
                break
        code = self.process.poll()
        self.kill()
        raise RuntimeError(
            f"reward worker for {self.reward_name!r} did not start within "
            f"{self.startup_timeout_s:.0f} s (exit code {code})"
        )

    def send(self, task_id: int, *args) -> None:
        self.wait_ready()
        self.conn.send((task_id, args))

    def kill(self) -> None:
        if self.is_alive():
            self.process.kill()
        if self.process is not None:
            try:
                self.process.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                pass
        if self.conn is not None and not self.conn.closed:
            self.conn.close()
        self.ready = False

    def restart(self) -> None:
        self.kill()
        self.start()

    def close(self) -> None:
        """Ask the child to exit, then make sure it has."""
        if self.is_alive() and self.conn is not None and not self.conn.closed:
            try:
                self.conn.send(None)
                self.process.wait(timeout=2.0)
            except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
