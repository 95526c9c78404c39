"""What the Linux kernel offers about processes: a child that dies with its parent
(PR_SET_PDEATHSIG), a subreaper that adopts orphans, and whether a pid is alive (/proc).

Every process of a run uses these (controller, zygote, agents, workers). They sit below
procs.py (which starts roles, through the zygote) and zygote.py, so both and the zygote's
server import them from here without importing each other.
"""
from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1  # linux/prctl.h
PR_SET_CHILD_SUBREAPER = 36
try:  # resolved once here: a child between fork and exec must not dlopen
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux
    _prctl = None


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Ask Linux to send `sig` to this process when its parent dies; False where prctl is
    unavailable. (Check `os.getppid() == 1` after it: the parent may have died before.)

    A torchrun agent starts its workers in sessions of their own, so a killed agent (SIGKILL,
    the OOM killer) would otherwise leave them running with parent pid 1.
    """
    return _prctl is not None and _prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0


def become_subreaper() -> bool:
    """Make orphaned descendants reparent to this process instead of pid 1 (Linux), so workers
    of a dead torchrun agent (sessions of their own) and whatever a reward double-forks stay in
    this process's tree, where `procs.descendants_of` finds them; False where prctl is unavailable."""
    return _prctl is not None and _prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def pid_alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    except OSError:
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False
