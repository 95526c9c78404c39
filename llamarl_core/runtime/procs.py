"""Process plumbing for the controller: start role groups, find and end every process."""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from collections import deque


def start_role(command: str, log_path: str, env: dict) -> subprocess.Popen:
    """Exec one torchrun command line (exactly as the plan printed it) in its own session."""
    log = open(log_path, "ab")
    try:
        return subprocess.Popen(shlex.split(command), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
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


def tail(path: str, lines: int = 15) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(deque(f, maxlen=lines)).rstrip()
    except OSError:
        return f"(no log at {path})"
