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

import os
import signal
import subprocess
import threading
import time
import traceback
from multiprocessing.connection import Connection

from llamarl_core.config.schema import RewardSettings  # the default bound: one source
from llamarl_core.rewards.custom import load_function
from llamarl_core.rewards.child import ChildHandle, spawn
from llamarl_core.rewards.proc_tree import (PR_SET_PDEATHSIG, become_subreaper, descendants, exited_children,
                                           kill_descendants, prctl)
from llamarl_core.rewards.specs import get_spec
from llamarl_core.rewards.values import checked_reward

WORKER_MEMORY_LIMIT_BYTES = 4 * 1024**3  # a runaway sympy expansion dies, not the machine
MAX_TRACEBACK_CHARS = 4000  # a custom reward's traceback, as sent to the reward log


def worker_main(conn: Connection, reward_name: str, parent_is_main_thread: bool,
                max_abs: float = RewardSettings.max_abs) -> None:
    """Entry point of the child process: warm up, then answer tasks until EOF or None."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent owns Ctrl-C and shutdown
    _die_with_parent(parent_is_main_thread)
    become_subreaper()  # whatever the reward forks stays in this tree (proc_tree.py)
    my_pid = os.getpid()
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
        fn = load_function(spec.function or reward_name)
        batch = bool(getattr(fn, "batch", False))
        call = _batch_call(fn, max_abs) if batch else _one_call(fn, max_abs)
        info = {"batch": batch}
    else:
        call, info, batch = (lambda *args: (float(spec.isolated(*args)), [])), {}, False
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
            score, errors = call(*args)
        except Exception as exc:  # noqa: BLE001 - a verifier error scores 0, never kills
            error = (traceback.format_exc()[-MAX_TRACEBACK_CHARS:] if spec.custom
                     else f"{type(exc).__name__}: {str(exc)[:200]}")
            n = len(args[0]) if batch else 1  # every item of the task scores 0; one traceback
            score = [0.0] * n if batch else 0.0
            errors = [(k, error if k == 0 else None) for k in range(n)]
        if os.getpid() != my_pid:  # a child the reward os.fork()ed returned here: not a worker
            os._exit(0)
        conn.send((task_id, score, errors))
        # Collect exited orphans re-parented to this subreaper, between tasks only: during a
        # task a reward's own ``subprocess`` calls must get their children's exit codes.
        for _ in exited_children():
            pass


def _one_call(fn, max_abs: float):
    def call(completion, example):
        score, error = checked_reward(fn(completion, example), max_abs)
        return score, ([] if error is None else [(0, error)])
    return call


def _batch_call(fn, max_abs: float):
    def call(completions: list, examples: list):
        values = list(fn(completions, examples))
        if len(values) != len(completions):
            raise ValueError(f"a batch=True reward returned {len(values)} scores for "
                             f"{len(completions)} completions")
        checked = [checked_reward(v, max_abs) for v in values]
        return [c[0] for c in checked], [(k, e) for k, (_, e) in enumerate(checked) if e is not None]
    return call


def _die_with_parent(parent_is_main_thread: bool, poll_s: float = 1.0) -> None:
    """Exit when the parent process is gone, even in the middle of a long computation.

    Linux ``PR_SET_PDEATHSIG`` kills the worker even inside one long C call (a huge
    integer power holds the GIL), but it fires when the parent *thread* that started the
    worker exits, so it is used only when that thread was the main thread. Always, a
    daemon thread also polls ``os.getppid()`` (it runs between bytecodes).
    """
    parent_pid = os.getppid()
    if parent_is_main_thread and prctl is not None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(0)

    def watch() -> None:
        while True:
            time.sleep(poll_s)
            if os.getppid() != parent_pid:
                os._exit(0)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


class WorkerHandle(ChildHandle):
    """Parent-side handle: start, wait until ready, run one task with a deadline, kill."""

    def __init__(self, reward_name: str, startup_timeout_s: float = 120.0,
                 max_abs: float = RewardSettings.max_abs, index: int = 0) -> None:
        self.reward_name, self.max_abs, self.index = reward_name, max_abs, index
        self.startup_timeout_s = startup_timeout_s
        self.spare: set[int] = set()  # processes the reward started while loading: kept
        self.start()

    def start(self) -> None:
        self.process, self.conn = spawn("llamarl_core.rewards.worker_entry",
                                        [self.reward_name, repr(float(self.max_abs))], f"reward worker {self.index}")
        self.ready, self.info = False, {}

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
                    self.spare = descendants([self.process.pid])
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

    def sweep(self) -> int:
        """Kill what the reward started during its tasks and left running (a forked sleeper, a
        detached daemon: the worker is their subreaper); what it started while loading stays."""
        return kill_descendants(self.process.pid, self.spare) if self.is_alive() else 0

    def close(self) -> None:
        """Kill what the reward started (before the worker exits and its orphans escape to
        init), ask the worker to exit, then make sure it has."""
        if self.is_alive():
            kill_descendants(self.process.pid)
        if self.is_alive() and self.conn is not None and not self.conn.closed:
            try:
                self.conn.send(None)
                self.process.wait(timeout=2.0)
            except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
