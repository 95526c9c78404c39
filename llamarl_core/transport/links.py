"""Rollout links: a 2-rank gloo group per directed (sender → receiver) pair and epochs.

No process group spans two roles (a gloo group dies with any member, and a restarted rank
could not join it), so each data-plane edge is its own group, named after both ends and
the membership epochs they were started in (transport/membership.py):

    links/generator0@1->reward0@0      generator rank 0 of epoch 1 → reward rank 0 of epoch 0

A restart moves a role's epoch, so every link touching it gets a new name: survivors drop
the old link (a receive posted on it ends with a connection error, or never, on a daemon
thread) and open the new one; nothing of the old group is reused.

Each link opens its own store connection: building a gloo group waits on the store, and a
TCPStore client serves one request at a time, so sharing the role loop's client would stall
its polls. The receiver waits for the sender's `hello` before building (for as long as it
takes, until it is closed), so a link to a rank that is still starting never times out.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from llamarl_core.transport.control import connect_run

HELLO_POLL_S = 0.05


class LinkClosed(Exception):
    """The link was dropped (its peer was restarted, or the run ended) before it was built."""


@dataclass(frozen=True)
class Endpoint:
    role: str
    rank: int    # within the role
    epoch: int   # the role's membership epoch

    def __str__(self) -> str:
        return f"{self.role}{self.rank}@{self.epoch}"


@dataclass(frozen=True)
class StoreAddress:
    """Where the controller's store is; each link connects on its own."""
    host: str
    port: int
    run_id: str
    timeout_s: float

    def connect(self) -> dist.Store:
        return connect_run(self.host, self.port, self.run_id, self.timeout_s)


class Link:
    """Rank 0 = `src` sends, rank 1 = `dst` receives; built on first use, by any thread."""

    def __init__(self, address: StoreAddress, src: Endpoint, dst: Endpoint, sending: bool, timeout_s: float):
        self.address, self.src, self.dst, self.sending = address, src, dst, sending
        self.name = f"links/{src}->{dst}"
        self.timeout_s = timeout_s
        self.closed = False
        self._pg = None
        self._lock = threading.Lock()

    def _group(self):
        with self._lock:
            if self._pg is None:
                store = dist.PrefixStore(self.name, self.address.connect())
                if self.sending:
                    store.set("hello", "1")
                else:
                    while not store.check(["hello"]):
                        if self.closed:
                            raise LinkClosed(self.name)
                        time.sleep(HELLO_POLL_S)
                self._pg = dist.ProcessGroupGloo(dist.PrefixStore("pg", store), 0 if self.sending else 1, 2,
                                                 timedelta(seconds=self.timeout_s))
            return self._pg

    def send(self, tensor: torch.Tensor, tag: int) -> None:
        self._group().send([tensor], 1, tag).wait()

    def recv(self, tensor: torch.Tensor, tag: int) -> None:
        self._group().recv([tensor], 0, tag).wait()

    def close(self) -> None:
        """Stop waiting to be built; a group already built is left to die with its peer."""
        self.closed = True


class Links:
    """This rank's links by name, so several streams (tags) share one group per pair."""

    def __init__(self, address: StoreAddress, timeout_s: float):
        self.address, self.timeout_s = address, timeout_s
        self._links: dict[str, Link] = {}

    def get(self, src: Endpoint, dst: Endpoint, sending: bool) -> Link:
        link = Link(self.address, src, dst, sending, self.timeout_s)
        return self._links.setdefault(link.name, link)

    def drop(self, role: str) -> None:
        """Close and forget every link with an end in `role` (it was restarted)."""
        for name, link in list(self._links.items()):
            if role in (link.src.role, link.dst.role):
                link.close()
                del self._links[name]
