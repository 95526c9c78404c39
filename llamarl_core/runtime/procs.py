"""Process plumbing for the controller: start role groups, find and end every process."""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import time
from collections import deque

from llamarl_core.rewards.proc_tree import descendants
from llamarl_core.runtime import zygote
from llamarl_core.runtime.kernel import die_with_parent, pid_alive


def is_ours(pid: int) -> bool:
    """Whether `pid` is a live descendant of this process: the only pids it may signal by number
    (a pid read from the store or a file names any process; this check is the trust boundary)."""
    return pid != os.getpid() and pid in descendants([os.getpid()]) and pid_alive(pid)


def kill_trees(roots) -> list[int]:
    """SIGKILL each root that is ours and every descendant of it (one that is orphaned meanwhile
    reparents to this process when it is a subreaper); the pids signalled."""
    roots = [r for r in roots if is_ours(r)]
    victims = sorted(descendants(roots) | set(roots))
    for pid in victims:
        signal_quietly(pid, signal.SIGKILL)
    return victims


def reap_adopted(pids) -> None:
    """waitpid the given direct children that no Popen/zygote handle will wait for."""
    for pid in pids:
        deadline = time.time() + 2.0
        while time.time() < deadline:
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    break
            except ChildProcessError:
                break
            time.sleep(0.02)


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


def signal_quietly(pid: int, sig: int, group: bool = False) -> None:
    try:
        os.killpg(pid, sig) if group else os.kill(pid, sig)
    except (ProcessLookupError, PermissionError, OSError):
        pass


def stop_all(procs: list[subprocess.Popen], worker_pids: list[int], grace_s: float = 5.0) -> None:
    """SIGTERM the torchrun groups (they stop their workers), then SIGKILL what is left.

    `worker_pids` come from the store, which any local process can write: only those that are
    this process's descendants are waited for or signalled (`is_ours`); others are ignored."""
    worker_pids = [pid for pid in worker_pids if is_ours(pid)]
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
    """Descendants of this process whose command line contains `text` (a stranger's process
    that merely mentions it is not ours)."""
    found = []
    for name in map(str, sorted(descendants([os.getpid()]))):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and pid_alive(int(name)):
            found.append(int(name))
    return found


def kill_mentioning(text: str) -> list[int]:
    """SIGKILL every descendant whose command line contains `text`; the pids it signalled."""
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
