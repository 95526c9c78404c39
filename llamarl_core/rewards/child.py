"""A killable child interpreter running a user's code (a reward worker, an environment worker),
joined to this process by a socket pair: started and stopped the same way for both.

Why a fresh interpreter (`python -m MODULE`) and not multiprocessing: its spawn/forkserver
contexts re-import the caller's `__main__`, and fork would copy threads, CUDA state and
process-group sockets. The child runs in a session of its own (a group kill reaches what it
starts), its fd 1/2 one pipe this process copies to its log with a cap (output_cap.py), and it
is killed with its whole tree (proc_tree.py), orphans it adopted as a subreaper included.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from multiprocessing.connection import Connection

from llamarl_core.rewards.output_cap import copy_capped
from llamarl_core.rewards.proc_tree import kill_tree


def spawn(module: str, args: list[str], label: str) -> tuple[subprocess.Popen, Connection]:
    """Start `python -m module <child fd> *args` (its end of the socket pair as the first
    argument, then whether this is the main thread: PR_SET_PDEATHSIG fires on the starting
    thread's exit) and return it with this side's connection. `label` names it in the log."""
    parent_sock, child_sock = socket.socketpair()
    child_fd = child_sock.fileno()
    on_main_thread = threading.current_thread() is threading.main_thread()
    process = subprocess.Popen(
        [sys.executable, "-m", module, str(child_fd), *args[:1], str(int(on_main_thread)), *args[1:]],
        pass_fds=(child_fd,), stdin=subprocess.DEVNULL, close_fds=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},  # a print reaches the log when made
    )
    child_sock.close()
    threading.Thread(target=copy_capped, args=(process.stdout, label),
                     name=f"{label.replace(' ', '-')}-output", daemon=True).start()
    return process, Connection(parent_sock.detach())


def stop(process: subprocess.Popen | None, conn: Connection | None) -> None:
    """Kill the child with its tree (if it runs), reap it, close the connection."""
    if process is not None and process.poll() is None:
        kill_tree(process.pid)  # the worker, its group, and every orphan it adopted
    if process is not None:
        try:
            process.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            pass
    if conn is not None and not conn.closed:
        conn.close()


class ChildHandle:
    """The parent's side of one such child: a subclass's `start` calls `spawn` (which module,
    which arguments) into `process` and `conn`; `kill` ends it with its tree, `restart` both."""

    process: subprocess.Popen | None = None
    conn: Connection | None = None
    ready = False

    def start(self) -> None:
        raise NotImplementedError

    def kill(self) -> None:
        stop(self.process, self.conn)
        self.ready = False

    def restart(self) -> None:
        self.kill()
        self.start()
