"""What both ends of a DDMA weight sync share, whatever the transport: the store namespace of a
membership epoch, the plan handshake, store waits with a restart watch, and `SyncStats`.

The endpoints themselves are in `ddma.py`; each transport's half of the protocol in
`ddma_slots.py` (shm, cuda_ipc) and `ddma_collective.py` (point-to-point sends).
"""
from __future__ import annotations

import datetime
import json
import time
from dataclasses import dataclass

import torch.distributed as dist

from llamarl_core.config.choices import DDMA_TRANSPORTS
from llamarl_core.transport.ddma_plan import DdmaPlan
from llamarl_core.transport.membership import MembershipChanged

TRANSPORTS = DDMA_TRANSPORTS
WAIT_SLICE_S = 0.2  # the receiving thread's store waits, cut in slices so that close() ends it
SLOTTED = ("shm", "cuda_ipc")  # the generator owns two slots; trainers write into them; store keys
INTERRUPT_POLL_S = 0.01


@dataclass
class SyncStats:
    """One sync as one side saw it (what `send`, `receive` and `poll` return)."""
    version: int
    seconds: float  # moving the bytes; excludes waiting for the peer (see wait_seconds)
    bytes: int  # payload bytes on the wire (after the wire dtype: fp8 + scales, bf16, ...)
    gbps: float  # bytes / seconds / 1e9
    transport: str
    wait_seconds: float = 0.0  # blocked on the peer: version not yet sent / slot not yet free


def transfer_store(store, epoch: int):
    return dist.PrefixStore(f"xfer/{epoch}", store)


def wait_keys(store, keys: list[str], timeout_s: float, what: str, interrupt=None) -> None:
    """Until every key exists. With `interrupt` (a restart watch), polled: it returns True (or
    raises) to give up — a wait on a generator that died must not outlive its restart."""
    if interrupt is not None:
        deadline = time.monotonic() + timeout_s
        while not store.check(keys):
            if interrupt():
                raise MembershipChanged(f"the generators were restarted while {what}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"DDMA weight sync timed out after {timeout_s:.1f} s {what}")
            time.sleep(INTERRUPT_POLL_S)
        return
    try:
        store.wait(keys, datetime.timedelta(seconds=timeout_s))
    except RuntimeError as e:
        if "timeout" in str(e).lower() or "timed out" in str(e).lower():
            raise TimeoutError(f"DDMA weight sync timed out after {timeout_s:.1f} s {what}") from e
        raise


def agreed_version(store, keys: list[str], what: str) -> int:
    """The one version every trainer rank wrote under `keys` (`what` names the send)."""
    versions = {int(store.get(k)) for k in keys}
    if len(versions) != 1:
        raise RuntimeError(f"{what}: trainer ranks gave different versions {sorted(versions)}")
    return versions.pop()


def _describe(ours: list, theirs: list) -> str:
    """The first difference between two ``DdmaPlan.spec()``s, naming the tensor."""
    if ours[:4] != theirs[:4]:
        return f"plan (T, G, tp, dtype) is {ours[:4]} here, {theirs[:4]} on trainer rank 0"
    for g, (a, b) in enumerate(zip(ours[4], theirs[4])):
        mine, other = dict((n, s) for n, s in a), dict((n, s) for n, s in b)
        for name in sorted(mine.keys() | other.keys()):
            if mine.get(name) != other.get(name):
                return (f"tensor '{name}' of generator rank {g}: shape {mine.get(name)} here, "
                        f"{other.get(name)} on trainer rank 0 (None = missing)")
    return "plans differ"


class Endpoint:
    role = ""

    interrupt = None  # the sender's restart watch (see wait_keys)

    def __init__(self, plan: DdmaPlan, rank: int, *, transport: str, store, epoch: int,
                 timeout_s: float):
        if transport not in TRANSPORTS:
            raise ValueError(f"DDMA transport must be one of {TRANSPORTS}, got {transport!r}")
        self.plan, self.rank, self.transport, self.timeout_s = plan, rank, transport, timeout_s
        self.epoch = epoch
        self.store = transfer_store(store, epoch)
        self.members = plan.trainer_ranks + plan.generator_ranks
        self.seq = 0  # syncs done (sent / adopted)
        self.last_version: int | None = None
        self.pg = None

    def _member(self) -> int:
        return self.rank if self.role == "trainer" else self.plan.trainer_ranks + self.rank

    def _handshake(self, error: str) -> None:
        """Everyone checks the plan against trainer 0's and every member raises the first error."""
        me = self._member()
        if me == 0:
            self.store.set("spec", json.dumps(self.plan.spec()))
        wait_keys(self.store, ["spec"], self.timeout_s, "waiting for trainer rank 0's plan", self.interrupt)
        theirs = json.loads(self.store.get("spec"))
        ours = json.loads(json.dumps(self.plan.spec()))
        if not error and theirs != ours:
            error = _describe(ours, theirs)
        self.store.set(f"verdict/{me}", error)
        keys = [f"verdict/{m}" for m in range(self.members)]
        wait_keys(self.store, keys, self.timeout_s, "waiting for every member's handshake", self.interrupt)
        for m in range(self.members):
            text = self.store.get(f"verdict/{m}").decode()
            if text:
                who = f"trainer rank {m}" if m < self.plan.trainer_ranks else \
                    f"generator rank {m - self.plan.trainer_ranks}"
                raise ValueError(f"DDMA weight sync setup failed on {who}: {text}")

    def _stats(self, version: int, seconds: float, nbytes: int, wait_s: float) -> SyncStats:
        return SyncStats(version, seconds, nbytes, nbytes / max(seconds, 1e-9) / 1e9, self.transport, wait_s)
