"""Membership epochs: who is in the run now, so cross-role traffic can outlive a dead peer.

A gloo group cannot survive a member's death, and a replacement process cannot join it. So
(docs/ARCHITECTURE.md, "Restart protocol") no group spans two roles: each role has its own
world (`pg/<role>/<epoch>`), and every cross-role channel (rollout links, the DDMA weight
sync) is built per membership epoch under a `PrefixStore` whose name carries the epochs of
the roles it joins. When the controller restarts a role group it bumps that role's epoch
(`membership/<role>`, = how many times it was restarted) and then the run's
`membership/epoch`; survivors see the latter move (one store read per poll), drop what they
had on the old epoch and build the new one, while the replacement ranks build it from the
start.

The epoch-scoped channels are the 2-rank links (transport/links.py) and the DDMA endpoints
(transport/ddma.py).
"""
from __future__ import annotations

import time

import torch.distributed as dist

EPOCH_KEY = "membership/epoch"
WATCH_EVERY_S = 0.1  # survivors look for a restart at most this often


class MembershipChanged(Exception):
    """A role this rank talks to was restarted while it waited: rebuild and carry on."""


def current_epoch(store: dist.Store) -> int:
    return int(store.add(EPOCH_KEY, 0))


def next_epoch(store: dist.Store) -> int:
    """The controller's step after restarting a role group; returns the new epoch."""
    return int(store.add(EPOCH_KEY, 1))


def role_epoch(store: dist.Store, role: str) -> int:
    """How many times `role`'s group was restarted (0 at start): its ranks' epoch."""
    return int(store.add(f"membership/{role}", 0))


def bump_role(store: dist.Store, role: str) -> int:
    """The controller, once `role`'s old group is gone: its new epoch, then the run's."""
    epoch = int(store.add(f"membership/{role}", 1))
    next_epoch(store)
    return epoch


class Watch:
    """The epochs of `roles` as this rank last saw them; `poll()` names the ones that moved."""

    def __init__(self, store: dist.Store, roles: list[str]):
        self.store, self.roles = store, list(roles)
        self.seen = current_epoch(store)
        self.epochs = {r: role_epoch(store, r) for r in self.roles}
        self._checked_at = 0.0

    def poll(self, force: bool = False) -> set[str]:
        """Roles restarted since the last poll (a store read at most every WATCH_EVERY_S)."""
        now = time.monotonic()
        if not force and now - self._checked_at < WATCH_EVERY_S:
            return set()
        self._checked_at = now
        seen = current_epoch(self.store)
        if seen == self.seen:
            return set()
        self.seen = seen
        epochs = {r: role_epoch(self.store, r) for r in self.roles}
        changed = {r for r in self.roles if epochs[r] != self.epochs[r]}
        self.epochs = epochs
        return changed
