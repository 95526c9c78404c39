"""The zygote process itself (runtime/zygote.py says why): import the agent modules once, then
fork one agent per request read on stdin and write 'pid N' / 'exit N CODE' lines on stdout.

It forks only while single-threaded (checked after its imports, else it exits and the
controller execs the agents instead) and ends when its stdin closes (the controller is
gone or done); every agent it forked then gets SIGTERM from the kernel (PR_SET_PDEATHSIG)
and stops its workers, as when an exec'd agent lost the controller.
"""
from __future__ import annotations

import atexit
import ctypes
import importlib
import json
import os
import runpy
import select
import signal
import sys
import threading
import traceback
import warnings

from llamarl_core.rewards.proc_tree import exited_children
from llamarl_core.runtime.kernel import die_with_parent
from llamarl_core.runtime.zygote import AGENT_MODULES, fork_unsafe


def _argv_area() -> tuple[int, int]:
    """[start, end) of this process's original argv strings (what /proc/PID/cmdline shows)."""
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[45]), int(fields[46])  # fields 48 and 49 of proc(5): arg_start, arg_end


def _set_cmdline(area: tuple[int, int], argv: list[str]) -> None:
    """Write `argv` over the reserved argv strings (NUL-separated, padded, last byte NUL)."""
    start, end = area
    data = "\0".join(argv).encode()[: end - start - 1]
    ctypes.memmove(start, data + b"\0" * (end - start - len(data)), end - start)


def _exit_code(e: SystemExit) -> int:
    if e.code is None or isinstance(e.code, int):
        return e.code or 0
    print(e.code, file=sys.stderr)  # what the interpreter does with sys.exit("message")
    return 1


def _run_agent(req: dict, zygote_pid: int, area: tuple[int, int], close_fds: list[int],
               inherited: tuple[int, int]) -> int:
    """In the forked child: become `python -m MODULE ARGS` as the controller asked."""
    os.setsid()  # its own session: stop_all signals the agent's group, never the zygote
    die_with_parent(signal.SIGTERM)
    if os.getppid() != zygote_pid:
        return 1  # the zygote died before PR_SET_PDEATHSIG was set
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for fd in close_fds:
        os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # drops the zygote's request pipe
    if req["log"] is not None:
        log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        out = err = log
    else:  # a worker: the streams its torchrun agent would have passed on (worker_fork.py)
        out, err = inherited
    os.dup2(out, 1)   # and its reply pipe
    os.dup2(err, 2)
    os.close(null)
    for fd in {out, err} - {1, 2}:
        os.close(fd)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    argv = req["argv"]
    _set_cmdline(area, argv)
    sys.argv, sys.path[0] = [argv[2], *argv[3:]], req["cwd"]  # as `python -m` sets them
    warnings.filterwarnings("ignore", message=".*found in sys.modules after import of package",
                            category=RuntimeWarning)  # runpy: the module was pre-imported, on purpose
    try:
        runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        code = _exit_code(e)
    except BaseException:
        traceback.print_exc()
        code = 1
    for t in threading.enumerate():  # then what the interpreter does at exit
        if t is not threading.main_thread() and not t.daemon:
            t.join()
    atexit._run_exitfuncs()
    sys.stdout.flush(), sys.stderr.flush()
    return code


def _reply(text: str) -> None:
    try:
        os.write(1, (text + "\n").encode())
    except BrokenPipeError:
        sys.exit(0)  # the controller is gone


def _reap() -> None:
    for pid, status in exited_children():
        _reply(f"exit {pid} {os.waitstatus_to_exitcode(status)}")


def serve(inherited: tuple[int, int] = (1, 2)) -> None:
    """`inherited`: fds of the stdout and stderr children without a log of their own get
    (a torchrun agent's, when it forked this to start its workers: worker_fork.py)."""
    die_with_parent(signal.SIGKILL)
    if os.getppid() == 1:
        sys.exit("llamarl zygote: the controller that started it is already gone")
    for name in AGENT_MODULES:
        importlib.import_module(name)
    unsafe = fork_unsafe()
    if unsafe:
        sys.exit(f"llamarl zygote: not forking (after import: {unsafe})")
    area = _argv_area()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the controller's to handle
    sig_r, sig_w = os.pipe()
    os.set_blocking(sig_r, False), os.set_blocking(sig_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(sig_w)
    buf, me = b"", os.getpid()
    while True:
        ready = select.select([0, sig_r], [], [])[0]
        if sig_r in ready:
            while True:
                try:
                    os.read(sig_r, 4096)
                except BlockingIOError:
                    break
            _reap()
        if 0 in ready:
            chunk = os.read(0, 65536)
            if not chunk:
                return  # the controller closed the pipe: done (agents get SIGTERM)
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                req = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    code = 1
                    try:
                        code = _run_agent(req, me, area, [sig_r, sig_w], inherited)
                    except BaseException:
                        traceback.print_exc()  # before its log was opened: the zygote's stderr
                    finally:
                        os._exit(code)
                _reply(f"pid {pid}")


if __name__ == "__main__":  # started by zygote.Zygote
    serve()
