"""Transfer groups per membership epoch: cross-role point-to-point that outlives a dead peer.

A gloo group cannot survive a member's death, and a replacement process cannot join it. So
(docs/ARCHITECTURE.md, "Restart protocol") cross-role traffic is meant to run on a group
built per membership epoch from `PrefixStore(f"xfer/{epoch}", store)`: every live rank of
every role, global rank numbering. When a role group is restarted the controller bumps
`membership/epoch`; survivors and the new ranks build epoch e+1 and carry on, while the
global group (start-up, role groups) is only used where every rank is alive.

The group is a bare `ProcessGroupGloo`, not registered with torch.distributed (a new rank
has no default group to register it in), so it is driven through its own methods.
Building blocks only: the role loops do not use this yet (restarts are not implemented).
"""
from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist

EPOCH_KEY = "membership/epoch"


def current_epoch(store: dist.Store) -> int:
    return int(store.add(EPOCH_KEY, 0))


def next_epoch(store: dist.Store) -> int:
    """The controller's step after restarting a role group; returns the new epoch."""
    return int(store.add(EPOCH_KEY, 1))


class TransferGroup:
    """Epoch `epoch`'s group over all `world_size` ranks; blocks until every rank has joined."""

    def __init__(self, store: dist.Store, epoch: int, rank: int, world_size: int, timeout_s: float):
        self.epoch, self.rank, self.world_size = epoch, rank, world_size
        self.pg = dist.ProcessGroupGloo(dist.PrefixStore(f"xfer/{epoch}", store), rank, world_size,
                                        timedelta(seconds=timeout_s))

    def send(self, tensor: torch.Tensor, dst: int, tag: int) -> None:
        self.pg.send([tensor], dst, tag).wait()

    def recv(self, tensor: torch.Tensor, src: int | None, tag: int) -> int:
        """Receive into `tensor` from `src` (None = any rank); returns the sender's rank."""
        if src is None:
            work = self.pg.recv_anysource([tensor], tag)
            work.wait()
            return work.source_rank()
        self.pg.recv([tensor], src, tag).wait()
        return src
