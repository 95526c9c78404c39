"""A torchrun agent's workers forked from a copy of the agent, not exec'd.

    agent (forked from the controller's zygote: torch imported, single-threaded so far)
      ├─ forks its worker zygote first, before torchrun starts any thread
      │    └─ worker: `python -u -m llamarl_core.runtime.worker role=R plan=P`, forked on request
      └─ then runs torchrun, whose SubprocessHandler asks that zygote for each worker

Why: a worker's own `import torch` was ~3 CPU-s of each worker of every run (the suite makes
~36 runs of 3+ workers). The agent has torch imported already (runtime/zygote.py), so a copy
of it forked before it has threads (torchrun's TCPStore server and its monitor come later)
is a clean place to fork workers from: no thread, no CUDA context (the agent never touches
CUDA), and each worker then imports only what it adds.

What torchrun sees is unchanged: a Popen-like handle per worker (pid, poll, wait, returncode:
`zygote.Agent`), each worker in its own session (torchrun's close() signals its process
group), with torchrun's env, this agent's cwd and stdout/stderr, and the plan's command line
on /proc. A worker dies with the worker zygote (PR_SET_PDEATHSIG, as it died with its agent)
and the worker zygote with the agent. Only the plan's worker module qualifies, with this
interpreter, no redirects of torchrun's own, and the agent's startup variables; anything
else, or LLAMARL_ZYGOTE=0, is exec'd as before.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from llamarl_core.runtime.zygote import Zygote, enabled, fork_unsafe, startup_vars

WORKER_MODULE = "llamarl_core.runtime.worker"
TORCHRUN_VARS = ("TORCHELASTIC_", "TORCH_NCCL_")  # what torchrun adds to a worker's env (read at run time)


class _ForkedProc:
    """What `Zygote` needs of its process (stdin, stdout, pid, poll, wait, kill) for a child
    this process forked itself."""

    def __init__(self, pid: int, request_fd: int, reply_fd: int):
        self.pid, self.returncode = pid, None
        self.stdin, self.stdout = os.fdopen(request_fd, "wb"), os.fdopen(reply_fd, "rb", buffering=0)

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                pid, status = self.pid, 0
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.time() + timeout
        while self.poll() is None:
            if deadline is not None and time.time() >= deadline:
                raise subprocess.TimeoutExpired([str(self.pid)], timeout)
            time.sleep(0.01)
        return self.returncode

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def fork_worker_zygote() -> Zygote | None:
    """Fork this (single-threaded) process's worker zygote; None where that cannot be done
    safely here (threads running, CUDA initialized, no fork, LLAMARL_ZYGOTE=0)."""
    if not enabled() or fork_unsafe():
        return None
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    sys.stdout.flush(), sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the worker zygote
        code = 1
        try:
            os.close(req_w), os.close(rep_r)
            out, err = os.dup(1), os.dup(2)  # the agent's streams, for its workers
            os.dup2(req_r, 0), os.dup2(rep_w, 1)
            os.close(req_r), os.close(rep_w)
            from llamarl_core.runtime.zygote_server import serve

            serve(inherited=(out, err))
            code = 0
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(req_r), os.close(rep_w)
    return Zygote(proc=_ForkedProc(pid, req_w, rep_r))


def _qualifies(zyg: Zygote, handler, argv: list[str], env: dict) -> bool:
    startup = {k: v for k, v in startup_vars(env).items() if not k.startswith(TORCHRUN_VARS)}
    return (handler._stdout is None and handler._stderr is None and len(argv) > 3
            and argv[0] == sys.executable and argv[1:3] == ["-m", WORKER_MODULE]
            and startup == zyg.startup and zyg.alive())


def install(zyg: Zygote) -> None:
    """Have torchrun start qualifying workers through `zyg` (in this agent process only)."""
    from torch.distributed.elastic.multiprocessing.subprocess_handler import subprocess_handler as sh

    original = sh.SubprocessHandler._popen

    def _popen(self, args: tuple, env: dict):
        argv = [str(a) for a in args]
        if argv[1:2] == ["-u"]:  # torchrun's unbuffered flag, as an env variable for a fork
            argv, env = argv[:1] + argv[2:], {**env, "PYTHONUNBUFFERED": "1"}
        if _qualifies(zyg, self, argv, env):
            try:
                return zyg.start(argv, env, None)
            except OSError as e:
                print(f"llamarl: forking a worker failed ({e}); exec'ing it instead", file=sys.stderr)
        return original(self, args, env)

    sh.SubprocessHandler._popen = _popen
