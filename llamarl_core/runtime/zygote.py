"""Start a role's torchrun agent by forking a pre-imported interpreter instead of exec'ing one.

    llamarl train                       (controller; it has threads: its store, the live view)
      └─ zygote: python -m llamarl_core.runtime.zygote_server    fresh interpreter, single-threaded,
           │      imports torch.distributed.run + loopback_torchrun once, then only forks
           ├─ agent: `python -m llamarl_core.runtime.loopback_torchrun … role=generator plan=…`
           ├─ agent: … role=trainer …     (each: own session, its log on fds 1/2, the role's env,
           └─ agent: … role=reward …       cmdline = the plan's command, its own rendezvous and
                                           its own workers, forked from a copy of the agent
                                           made before it had threads: worker_fork.py)

Why: a small run is seven Python processes and most of their CPU time is `import torch`
(~3 CPU-s each on the test machine); the three agents import it only to run torchrun. Forking
them from one interpreter that imported it already saves that import twice per run. The
controller itself never forks (it has threads); the zygote is exec'd like any child and forks
only while it alone is running (no thread: OMP/OpenBLAS pools set to one thread for its import,
and it imports nothing that touches CUDA, so a GPU worker never inherits a CUDA context; each
worker sets its role's thread count itself, `torch.set_num_threads`).

An agent runs its command exactly as `python -m MODULE ARGS` would (runpy, run_name
"__main__", sys.argv = [module path, *ARGS]), with the env the controller gave it, in its own
session, writes its command line over the zygote's reserved argv so `ps` and /proc show the
plan's command, and gets SIGTERM if the zygote dies; the zygote dies with the controller (its
request pipe closes; PR_SET_PDEATHSIG as well). The zygote reports each agent's exit status,
read by `Agent.poll()`. Only `python -m <an agent module>` lines with this interpreter qualify
(`eligible`); anything else, or LLAMARL_ZYGOTE=0, keeps subprocess.Popen.
"""
from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import time

from llamarl_core.runtime.kernel import die_with_parent, pid_alive

AGENT_MODULES = ("llamarl_core.runtime.loopback_torchrun", "torch.distributed.run")
SERVER_MODULE = "llamarl_core.runtime.zygote_server"  # the zygote process runs `python -m` this
TITLE_ROOM = 4096          # bytes of argv the zygote reserves for each agent's command line
START_TIMEOUT_S = 120.0    # the first request waits for the zygote's imports
_ISOLATED = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


STARTUP_PREFIXES = ("PYTHON", "LD_", "MALLOC", "TORCH", "CUDA")  # read as an interpreter starts


def startup_vars(env) -> dict:
    """The variables that shape an interpreter's start (the loader, sys.path, torch's import);
    PYTHONUNBUFFERED is set again in each agent's streams by the zygote."""
    return {k: v for k, v in env.items() if k.startswith(STARTUP_PREFIXES) and k != "PYTHONUNBUFFERED"}


def enabled() -> bool:
    """Forking processes instead of exec'ing them is on (LLAMARL_ZYGOTE) and possible here."""
    return os.environ.get("LLAMARL_ZYGOTE", "1") != "0" and hasattr(os, "fork") and os.path.isdir("/proc")


def fork_unsafe() -> str | None:
    """Why this process must not fork now (threads running, CUDA initialized), or None."""
    threads = len(os.listdir("/proc/self/task"))
    torch = sys.modules.get("torch")
    cuda = torch is not None and torch.cuda.is_initialized()
    return f"{threads} threads, CUDA initialized: {cuda}" if threads != 1 or cuda else None


def eligible(argv: list[str], env: dict) -> bool:
    """Whether `argv` may be started from the zygote: `python -m <agent module> …` of this very
    interpreter, with this process's startup variables."""
    if not enabled():
        return False
    return (len(argv) > 3 and argv[0] == sys.executable and argv[1] == "-m" and argv[2] in AGENT_MODULES
            and startup_vars(env) == startup_vars(os.environ))


class Agent:
    """A Popen-like handle on an agent the zygote forked: pid, poll(), wait(timeout), returncode."""

    def __init__(self, zygote: "Zygote", pid: int, args: list[str]):
        self.zygote, self.pid, self.args, self.returncode = zygote, pid, args, None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.zygote.collect()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.time() + timeout
        while self.poll() is None:
            if deadline is not None and time.time() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self.zygote.collect(wait_s=0.05)
        return self.returncode


class Zygote:
    """The controller's side: one zygote process, asked over a pipe to fork agents (or, built
    with `proc` by worker_fork.py, a torchrun agent's own forked copy that forks its workers)."""

    def __init__(self, proc=None):
        self.startup = startup_vars(os.environ)
        if proc is None:
            env = {**os.environ, **_ISOLATED, "PYTHONUNBUFFERED": "1"}
            proc = subprocess.Popen([sys.executable, "-m", SERVER_MODULE, " " * TITLE_ROOM], env=env,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True,
                                    preexec_fn=lambda: die_with_parent(signal.SIGKILL))
        self.proc = proc
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.agents: dict[int, Agent] = {}
        self.exits: dict[int, int] = {}  # statuses read before their pid's reply
        self.pending: list[str] = []
        self.buf = b""
        atexit.register(self.close)  # the controller reaps what it started

    def close(self, timeout_s: float = 10.0) -> None:
        """End the zygote (its agents, if any are left, get SIGTERM) and reap it."""
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def start(self, argv: list[str], env: dict, log_path: str | None) -> Agent:
        """`log_path` None: the child writes to the zygote's inherited stdout/stderr."""
        if log_path is not None:
            open(log_path, "ab").close()  # the log exists when start returns, as with Popen
        req = {"argv": argv, "env": env, "log": log_path, "cwd": os.getcwd()}
        self.proc.stdin.write(json.dumps(req).encode() + b"\n")
        self.proc.stdin.flush()
        deadline = time.time() + START_TIMEOUT_S
        while not self.pending:
            if not self.alive() or time.time() > deadline:
                why = "did not answer" if self.alive() else f"exited with code {self.proc.returncode}"
                self.proc.kill()  # a late fork would run the role twice; its agents get SIGTERM
                raise OSError(f"the zygote (pid {self.proc.pid}) {why}")
            self.collect(wait_s=0.1)
        pid = int(self.pending.pop(0))
        agent = self.agents[pid] = Agent(self, pid, argv)
        agent.returncode = self.exits.pop(pid, None)
        return agent

    def collect(self, wait_s: float = 0.0) -> None:
        """Read the zygote's replies: 'pid N' per request, 'exit N CODE' per agent reaped."""
        fd = self.proc.stdout.fileno()
        if wait_s and not select.select([fd], [], [], wait_s)[0]:
            return
        try:
            while chunk := os.read(fd, 65536):
                self.buf += chunk
        except BlockingIOError:
            pass
        *lines, self.buf = self.buf.split(b"\n")
        for line in lines:
            kind, *rest = line.decode().split()
            if kind == "pid":
                self.pending.append(rest[0])
            elif kind == "exit":
                pid, code = int(rest[0]), int(rest[1])
                if pid in self.agents:
                    self.agents.pop(pid).returncode = code
                else:
                    self.exits[pid] = code
        if not self.alive():  # agents it can no longer report were sent SIGTERM (their parent died)
            for agent in self.agents.values():
                if agent.returncode is None and not pid_alive(agent.pid):
                    agent.returncode = -signal.SIGTERM


_zygote: Zygote | None = None


def server_pid() -> int | None:
    """The pid of this process's zygote, if one runs (the controller's sweep keeps it)."""
    return _zygote.proc.pid if _zygote is not None and _zygote.alive() else None


def start_agent(argv: list[str], env: dict, log_path: str) -> Agent | None:
    """Fork `argv` from this process's zygote (started on first use); None if that failed or
    the zygote started under other startup variables than `env`'s (then: exec it)."""
    global _zygote
    try:
        if _zygote is None or not _zygote.alive():
            _zygote = Zygote()
        if startup_vars(env) != _zygote.startup:
            return None
        return _zygote.start(argv, env, log_path)
    except OSError as e:
        print(f"llamarl: starting {argv[2]} from the zygote failed ({e}); exec'ing it instead",
              file=sys.stderr)
        return None
