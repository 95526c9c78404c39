"""CUDA IPC byte buffers: the shm transport's GPU twin, for a generator and a trainer that
share one GPU (`resources.share_devices`; NCCL refuses two ranks of a group on one device).

The trainer allocates the bucket buffers on its GPU and hands out their IPC handles (torch's
`reduce_tensor`: a picklable rebuild function and its arguments, as torch.multiprocessing
sends them); the generator rebuilds them, mapping the same device memory, so a sync is one
device-to-device copy in and one out. The protocol around the buffers (two slots, version
keys, acknowledgements) is the shm transport's, in weight_sync.py. Packing and unpacking are
kernels on the current stream, so each side synchronises before it publishes or acknowledges.
"""
from __future__ import annotations

import torch
from torch.multiprocessing.reductions import reduce_tensor


def create(sizes: list[int], device: torch.device | str | None = None) -> list[torch.Tensor]:
    """One zeroed uint8 buffer per entry of `sizes`, on `device` (default: the current GPU)."""
    device = device or torch.device("cuda", torch.cuda.current_device())
    return [torch.zeros(n, dtype=torch.uint8, device=device) for n in sizes]


def share(buffers: list[torch.Tensor]) -> list[tuple]:
    """Picklable handles; the owner must keep `buffers` alive while readers map them."""
    return [reduce_tensor(b) for b in buffers]


def open_shared(handles: list[tuple]) -> list[torch.Tensor]:
    """The owner's buffers, mapped into this process (same GPU memory)."""
    return [rebuild(*args) for rebuild, args in handles]


def fence() -> None:
    """Wait for this process's queued copies to finish before another process reads them."""
    torch.cuda.synchronize()
