"""What the Linux kernel offers about processes beside their tree (rewards/proc_tree.py): a
child that dies with its parent (PR_SET_PDEATHSIG) and whether a pid is alive (/proc).

Every process of a run uses these (controller, zygote, agents, workers). They sit below
procs.py (which starts roles, through the zygote) and zygote.py, so both and the zygote's
server import them from here without importing each other.
"""
from __future__ import annotations

import os
import signal

from llamarl_core.rewards.proc_tree import PR_SET_PDEATHSIG, prctl


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Ask Linux to send `sig` to this process when its parent dies; False where prctl is
    unavailable. (Check `os.getppid() == 1` after it: the parent may have died before.)

    A torchrun agent starts its workers in sessions of their own, so a killed agent (SIGKILL,
    the OOM killer) would otherwise leave them running with parent pid 1.
    """
    return prctl is not None and prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0


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
