"""Process plumbing for the controller: start role groups, find and end every process."""
from __future__ import annotations

import ctypes
import json
import os
import re
import shlex
import signal
import subprocess
import time
from collections import deque

from llamarl_core.runtime import zygote


PR_SET_PDEATHSIG = 1  # linux/prctl.h
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


def start_role(command: str, log_path: str, env: dict) -> subprocess.Popen | zygote.Agent:
    """Start one torchrun command line (exactly as the plan printed it) in its own session;
    the agent gets SIGTERM (and stops its workers) if the controller dies. A local agent line
    is forked from the zygote, which skips the agent's own `import torch` (runtime/zygote.py);
    any other line, or a zygote that fails, is exec'd."""
    argv = shlex.split(command)
    if zygote.eligible(argv, env):
        agent = zygote.start_agent(argv, env, log_path)
        if agent is not None:
            return agent
    log = open(log_path, "ab")
    try:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True,
                                preexec_fn=lambda: die_with_parent(signal.SIGTERM))
    finally:
        log.close()


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


def signal_quietly(pid: int, sig: int, group: bool = False) -> None:
    try:
        os.killpg(pid, sig) if group else os.kill(pid, sig)
    except (ProcessLookupError, PermissionError, OSError):
        pass


def stop_all(procs: list[subprocess.Popen], worker_pids: list[int], grace_s: float = 5.0) -> None:
    """SIGTERM the torchrun groups (they stop their workers), then SIGKILL what is left."""
    for p in procs:
        if p.poll() is None:
            signal_quietly(p.pid, signal.SIGTERM, group=True)
    deadline = time.time() + grace_s
    while time.time() < deadline and (any(p.poll() is None for p in procs) or any(map(pid_alive, worker_pids))):
        time.sleep(0.1)
    for pid in worker_pids:
        if pid_alive(pid):
            signal_quietly(pid, signal.SIGKILL)
    for p in procs:
        if p.poll() is None:
            signal_quietly(p.pid, signal.SIGKILL, group=True)
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def pids_mentioning(text: str) -> list[int]:
    """Processes (other than this one) whose command line contains `text`."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and pid_alive(int(name)):
            found.append(int(name))
    return found


def kill_mentioning(text: str) -> list[int]:
    """SIGKILL every process whose command line contains `text`; the pids it signalled."""
    pids = pids_mentioning(text)
    for pid in pids:
        signal_quietly(pid, signal.SIGKILL)
    return pids


def _is_metrics(line: str) -> bool:
    """A metrics line the trainer echoes to its log (they are in metrics.jsonl already)."""
    if not line.startswith("{"):
        return False
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def tail(path: str, lines: int = 15) -> str:
    """The log's last `lines` lines, without the metrics JSON lines a trainer log is full of."""
    try:
        with open(path, errors="replace") as f:
            return "".join(deque((ln for ln in f if not _is_metrics(ln)), maxlen=lines)).rstrip()
    except OSError:
        return f"(no log at {path})"


def exit_cause(torchrun_log: str, pid: int | str, wait_s: float = 2.0) -> str:
    """How worker `pid` ended, as its torchrun agent logged it: 'killed by SIGKILL', 'exited
    with code 1', or '' (not logged within wait_s: the agent itself may be gone)."""
    found = re.compile(rf"exitcode: (-?\d+)\)? local_rank: \d+ \(pid: {int(pid)}\)")
    deadline = time.time() + wait_s
    while True:
        try:
            with open(torchrun_log, errors="replace") as f:
                m = found.search(f.read())
        except OSError:
            m = None
        if m:
            code = int(m.group(1))
            if code < 0:
                try:
                    return f"killed by {signal.Signals(-code).name}"
                except ValueError:
                    return f"killed by signal {-code}"
            return f"exited with code {code}"
        if time.time() >= deadline:
            return ""
        time.sleep(0.1)
