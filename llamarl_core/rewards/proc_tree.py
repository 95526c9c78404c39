"""A process tree read from ``/proc``, and what the Linux kernel offers to keep one whole:
so nothing a user's reward forks outlives the task or the worker, and nothing a run starts
outlives the run (runtime/procs.py and the zygote use the same functions).

Why not only a process group: a reward may start a child that calls ``setsid`` itself (a
double-forked daemon), which leaves the group, and once its parent exits it is re-parented
away from the worker. So each worker makes itself a *child subreaper*
(``PR_SET_CHILD_SUBREAPER``): every orphan among its descendants is re-parented to the worker,
and the tree under the worker's pid, read from ``/proc/<pid>/stat``, holds all of them. The
pool kills only pids in the tree of a worker it started itself (the ``Popen`` pid), never a
pid from anywhere else. To kill a tree without a race (a process forking while we look),
every member is stopped first (a stopped process cannot fork), the tree re-read until no new
member appears, then all are killed.
"""
from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Iterable, Iterator

PR_SET_PDEATHSIG = 1  # linux/prctl.h
PR_SET_CHILD_SUBREAPER = 36
try:  # resolved once here: a child between fork and exec must not dlopen
    prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux
    prctl = None


def become_subreaper() -> bool:
    """Make orphaned descendants reparent to this process instead of pid 1 (Linux), so workers
    of a dead torchrun agent (sessions of their own) and whatever a reward double-forks stay in
    this process's tree, where `descendants` finds them; False where prctl is unavailable."""
    return prctl is not None and prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def _parents() -> dict[int, int]:
    """pid -> parent pid of every live process (``/proc/<pid>/stat``: the comm field may hold
    spaces and parentheses, so the fields after its last ')' are read)."""
    out: dict[int, int] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rpartition(b")")[2].split()
            out[int(name)] = int(fields[1])  # fields[0] is the state, [1] the parent pid
        except (OSError, ValueError, IndexError):
            continue
    return out


def children_of(pid: int) -> set[int]:
    return {p for p, pp in _parents().items() if pp == pid}


def descendants(roots: Iterable[int]) -> set[int]:
    """Every live process below any of ``roots`` (the roots themselves excluded)."""
    children: dict[int, list[int]] = {}
    for pid, ppid in _parents().items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), list(roots)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def exited_children() -> Iterator[tuple[int, int]]:
    """(pid, wait status) of each child that has exited, reaped without blocking."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        yield pid, status


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_descendants(root: int, spare: frozenset[int] | set[int] = frozenset()) -> int:
    """Stop, then SIGKILL, every process below ``root`` except the pids in ``spare`` (a spared
    process's own children are not spared). Returns how many were killed."""
    stopped: set[int] = set()
    while True:
        new = descendants([root]) - set(spare) - stopped
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        stopped |= new
    for pid in stopped:
        _signal(pid, signal.SIGKILL)
    return len(stopped)


def kill_tree(root: int) -> None:
    """Stop ``root`` (so its tree holds still and keeps its orphans), kill everything below it,
    then its process group (it leads one: ``start_new_session``), then ``root``."""
    _signal(root, signal.SIGSTOP)
    kill_descendants(root)
    try:
        os.killpg(root, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    _signal(root, signal.SIGKILL)
