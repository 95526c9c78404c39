"""Shared-memory byte buffers for same-host weight sync.

A buffer is a file in ``/dev/shm`` mapped with ``torch.from_file(shared=True)``:
the trainer writes into the mapping and every generator on the host maps the same
pages, so a sync costs one write and one read of the weights and no socket copy.

Names: ``llamarl-ws-<run id>-e<epoch>-g<generator rank>-<slot>``, derived by the generator
(which creates the file, ``O_EXCL``) and each trainer rank (which maps it) from what both
already know; never read from the store, which any local process can write, so no store value
can choose the file weights are written into. The reader maps only a regular file of its own
user (no symlink), of the planned size.

Lifetime: names are unique per run and membership epoch. The owner unlinks the
files as soon as every reader has mapped them; on Linux a mapping outlives its
file name, so from then on nothing is left in ``/dev/shm`` even if a process is
killed. Until that point a crash can leave files behind; ``sweep(run_id)`` removes
a run's leftovers.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path

import torch

SHM_DIR = Path("/dev/shm")
PREFIX = "llamarl-ws"


RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def check_run_id(run_id: str) -> str:
    """The run id, if it is safe inside a file name (letters, digits, '-', '_'); else ValueError."""
    if not isinstance(run_id, str) or not RUN_ID.fullmatch(run_id):
        raise ValueError(f"run id {run_id!r} is not 1-64 letters, digits, '-' or '_': "
                         "it cannot name shared-memory buffers")
    return run_id


def slot_paths(run_id: str, epoch: int, rank: int, count: int) -> list[str]:
    """The file names of generator ``rank``'s ``count`` slots in membership ``epoch``."""
    head = f"{PREFIX}-{check_run_id(run_id)}-e{int(epoch)}-g{int(rank)}"
    return [str(SHM_DIR / f"{head}-{i}") for i in range(int(count))]


def create(path: str, nbytes: int) -> torch.Tensor:
    """Create and map a ``uint8`` shared buffer of ``nbytes``, its pages touched now.

    ``posix_fallocate`` reserves every page first, so a full ``/dev/shm`` is a clear
    error here rather than a SIGBUS at the first write; writing zeros then maps the
    pages, so the first weight sync is not slowed by page faults.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        if nbytes > 0:
            os.posix_fallocate(fd, 0, nbytes)
    except OSError as e:
        os.unlink(path)
        raise OSError(f"cannot reserve {nbytes} bytes in {SHM_DIR} for weight sync ({e.strerror}); "
                      f"free: {shutil.disk_usage(SHM_DIR).free} bytes") from e
    finally:
        os.close(fd)
    buf = torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8)
    buf.zero_()
    return buf


def open_existing(path: str, nbytes: int) -> torch.Tensor:
    """Map a buffer created by another process of this user on this host."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"shared-memory buffer {path} not found: the 'shm' weight-sync transport needs the "
            "trainer and this generator on the same host (use transport='collective' otherwise)"
        ) from None
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
        raise ValueError(f"shared-memory buffer {path} is not a regular file of this user "
                         "(a symlink or another user's file): not mapped")
    actual = st.st_size
    if actual != nbytes:
        raise ValueError(f"shared-memory buffer {path} has {actual} bytes, expected {nbytes}")
    return torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8)


def unlink(paths: list[str]) -> None:
    for p in paths:
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass


def sweep(run_id: str) -> list[str]:
    """Remove every leftover buffer of ``run_id`` (e.g. after a crash); returns the names."""
    removed = sorted(str(p) for p in SHM_DIR.glob(f"{PREFIX}-{check_run_id(run_id)}-*"))
    unlink(removed)
    return removed
