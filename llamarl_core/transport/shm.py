"""Shared-memory byte buffers for same-host weight sync.

A buffer is a file in ``/dev/shm`` mapped with ``torch.from_file(shared=True)``:
the trainer writes into the mapping and every generator on the host maps the same
pages, so a sync costs one write and one read of the weights and no socket copy.

Lifetime: file names are unique (run id + random token). The owner unlinks the
files as soon as every reader has mapped them; on Linux a mapping outlives its
file name, so from then on nothing is left in ``/dev/shm`` even if a process is
killed. Until that point a crash can leave files behind; ``sweep(run_id)`` removes
a run's leftovers.
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path

import torch

SHM_DIR = Path("/dev/shm")
PREFIX = "llamarl-ws"


def shm_available() -> bool:
    return SHM_DIR.is_dir() and os.access(SHM_DIR, os.W_OK)


def _safe(run_id: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in run_id) or "run"


def new_paths(run_id: str, count: int) -> list[str]:
    """``count`` fresh, unique file names for one owner."""
    token = secrets.token_hex(6)
    return [str(SHM_DIR / f"{PREFIX}-{_safe(run_id)}-{os.getpid()}-{token}-{i}") for i in range(count)]


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
    """Map a buffer created by another process on this host."""
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"shared-memory buffer {path} not found: the 'shm' weight-sync transport needs the "
            "trainer and this generator on the same host (use transport='collective' otherwise)"
        )
    actual = os.path.getsize(path)
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
    removed = sorted(str(p) for p in SHM_DIR.glob(f"{PREFIX}-{_safe(run_id)}-*"))
    unlink(removed)
    return removed
