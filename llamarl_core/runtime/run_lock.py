"""One run per run directory: an exclusive `flock` on RUN_DIR/run.lock for the run's lifetime.

The controller (`llamarl train`, node 0 of `llamarl node`) takes it before writing anything
into the directory; a second run on the same directory stops with exit 2 naming the holder's
pid. The kernel drops the lock when the holder's file is closed, so it is released on any
exit, SIGKILL included; the file stays (deleting it would race with a new holder) and names
the last holder only while that one holds it.
"""
from __future__ import annotations

import fcntl
import os

from llamarl_core.config.errors import ConfigError

LOCK_FILE = "run.lock"


class RunDirLock:
    def __init__(self, path: str, fd: int):
        self.path, self._fd = path, fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = None

    def __enter__(self) -> "RunDirLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def acquire(run_dir: str, record_pid: bool = True) -> RunDirLock:
    """Hold run_dir's lock (creating the directory), or ConfigError naming the holder."""
    os.makedirs(run_dir, exist_ok=True)
    fd = os.open(os.path.join(run_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)  # not inherited
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise ConfigError(f"run.dir={run_dir} is in use by another llamarl run (pid {holder}); "
                          f"wait for it to end or choose another run.dir") from None
    if record_pid:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return RunDirLock(run_dir, fd)


def check_free(run_dir: str) -> None:
    """ConfigError if another run holds run_dir now (nothing is created for a missing one)."""
    if os.path.isfile(os.path.join(run_dir, LOCK_FILE)):
        acquire(run_dir, record_pid=False).release()
