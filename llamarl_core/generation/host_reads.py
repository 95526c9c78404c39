"""Device values the host must see (which rows ended), read one decode step late.

Reading a GPU tensor on the host (`.tolist()`, `.item()`) waits for every kernel queued
before it, so the GPU runs dry while the host decides and launches the next step. Instead,
`start(t)` queues a non-blocking copy of `t` into pinned host memory and records an event;
`finish` (called a step later, after the next step's kernels are queued) waits for that event
only, which has usually passed. One event wait per step is the decode loop's only host sync.
On the CPU a tensor is already in host memory: `start` keeps it and `finish` reads it.
"""
from __future__ import annotations

import torch


class LateHostRead:
    def __init__(self, device: torch.device):
        self.cuda = torch.device(device).type == "cuda"

    def start(self, t: torch.Tensor) -> tuple:
        if not self.cuda:
            return t, None
        host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        host.copy_(t, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        return host, event

    @staticmethod
    def finish(handle: tuple) -> list:
        host, event = handle
        if event is not None:
            event.synchronize()
        return host.tolist()
