"""DDMA's slotted transports: the trainers write straight into the generator's own slots.

``shm`` (one host): the generator creates its slots in ``/dev/shm`` (`shm.py`), every
trainer rank maps them and writes its pieces. ``cuda_ipc`` (a generator and a trainer sharing
one GPU, ``resources.share_devices``; NCCL refuses two ranks of one group on a device): the
same protocol, with the slots in the generator's GPU memory, mapped by the trainer through
CUDA IPC handles (`cuda_ipc.py`); both sides synchronise the device before publishing a key.

Store keys (under the epoch's ``xfer/{epoch}``): ``slots/{g}`` with shm, how many slots the
generator created (a ready flag: both sides derive the file names, `shm.slot_paths`), with
cuda_ipc their handles (JSON); ``done/{n}/{t}`` trainer t's part of send ``n`` is written; ``adopted/{n}/{g}`` the
generator left the slot it computed from (two slots); with one slot ``want/{n}/{t}`` the
trainers wait to write and ``free/{n}/{g}`` the generator paused for them.

Mixins of `ddma.DdmaSender` / `ddma.DdmaReceiver` (which pick this half when the transport
is ``shm`` or ``cuda_ipc``).
"""
from __future__ import annotations

import datetime
import time

import torch

from llamarl_core.transport import cuda_ipc, shm
from llamarl_core.transport.ddma_endpoint import WAIT_SLICE_S, agreed_version, wait_keys
from llamarl_core.transport.ddma_plan import dst_block, fp8_rows, scale_view, src_block, tensor_view


def _open_slots(transport: str, published: bytes, nbytes: int, names: tuple) -> list[torch.Tensor]:
    """Generator g's slots: shm files at the names this side derives (`names`: run id, epoch,
    g, slot count; the store says only how many were created), or CUDA IPC handles, JSON
    checked before use: nothing read from the store is unpickled or names a file."""
    if transport == "shm":
        run_id, epoch, g, count = names
        if published != str(count).encode():
            raise ValueError(f"generator {g} created {published[:16]!r} shared-memory slots, the plan needs {count}")
        return [shm.open_existing(p, nbytes) for p in shm.slot_paths(run_id, epoch, g, count)]
    slots = cuda_ipc.open_shared(cuda_ipc.from_json(published, nbytes))
    if any(s.numel() != nbytes for s in slots):
        raise ValueError(f"CUDA IPC slots have {[s.numel() for s in slots]} bytes, the plan needs {nbytes}")
    return slots


class SlottedSend:
    """Trainer side: map every generator's slots, then copy each piece into place."""

    def _map_slots(self) -> str:
        """Map the generators' slots (they created them before the handshake); the error, or ""."""
        plan = self.plan
        try:
            wait_keys(self.store, [f"slots/{g}" for g in range(plan.generator_ranks)], self.timeout_s,
                      "waiting for the generators' slots", self.interrupt)
            for g in range(plan.generator_ranks):
                names = (self.run_id, self.epoch, g, plan.num_slots)
                self._slots.append(_open_slots(self.transport, self.store.get(f"slots/{g}"), plan.slot_nbytes[g], names))
        except (OSError, ValueError, RuntimeError) as e:
            return str(e)
        return ""

    def _send_shm(self, local, version: int) -> float:
        n, wait_s, k = self.seq, 0.0, self.plan.num_slots
        G = self.plan.generator_ranks
        if k == 1:  # one slot: the generators pause at a decode-step boundary before it is rewritten
            self.store.set(f"want/{n}/{self.rank}", str(version))
            keys, what = [f"free/{n}/{g}" for g in range(G)], "pause decoding"
        else:  # slot n % 2 was left by every generator once it adopted send n - 1
            keys, what = ([f"adopted/{n - 1}/{g}" for g in range(G)] if n >= k else []), f"adopt send #{n - 1}"
        if keys:
            t = time.perf_counter()
            wait_keys(self.store, keys, self.timeout_s, f"waiting for the generators to {what} "
                      f"before writing weight version {version}", self.interrupt)
            wait_s = time.perf_counter() - t
        for g, pieces in enumerate(self.links):
            tensors = {t.name: t for t in self.plan.slots[g]}
            slot = self._slots[g][n % k]
            for p in pieces:  # the one copy: trainer shard → generator's staging slot, dtype on the way
                t = tensors[p.name]
                dst = dst_block(tensor_view(slot, t, self.plan.dtype), p)
                if t.fp8:
                    q, scales = fp8_rows(src_block(local[p.name], p), self.plan.dtype)
                    dst.copy_(q)
                    scale_view(slot, t)[p.dst_rows[0]:p.dst_rows[1]].copy_(scales)
                else:
                    dst.copy_(src_block(local[p.name], p))
        if self.transport == "cuda_ipc":
            cuda_ipc.fence()  # the copies have landed before the generator may read them
        self.store.set(f"done/{n}/{self.rank}", str(version))
        return wait_s


class SlottedReceive:
    """Generator side: own the slots, publish them, and read the trainers' store keys."""

    def _create_slots(self, run_id: str, device: torch.device) -> list[torch.Tensor]:
        plan, rank = self.plan, self.rank
        if self.transport == "shm":
            self._paths = shm.slot_paths(run_id, self.epoch, rank, plan.num_slots)
            return [shm.create(p, plan.slot_nbytes[rank]) for p in self._paths]
        return cuda_ipc.create([plan.slot_nbytes[rank]] * plan.num_slots, device)  # kept alive by self.slots

    def _publish_slots(self) -> None:
        if self.transport == "shm":
            self.store.set(f"slots/{self.rank}", str(len(self._paths)))
        else:
            self.store.set(f"slots/{self.rank}", cuda_ipc.to_json(cuda_ipc.share(self.slots)))

    def _arrived_slotted(self) -> int | None:
        """The version of send #seq if every trainer has written its part, else None."""
        keys = [f"done/{self.seq}/{t}" for t in range(self.plan.trainer_ranks)]
        return agreed_version(self.store, keys, f"DDMA send #{self.seq}") if self.store.check(keys) else None

    def _wanted_slotted(self) -> bool:
        """One slot: the trainers wait to write the next version."""
        return self.store.check([f"want/{self.seq}/0"])

    def _left_slot_slotted(self, key: str) -> None:
        if self.transport == "cuda_ipc":
            cuda_ipc.fence()  # kernels queued on the slot have read it before it is rewritten
        self.store.set(key, b"1")

    def _wait_slotted(self, left_s: float) -> None:
        try:
            self.store.wait([f"done/{self.seq}/{t}" for t in range(self.plan.trainer_ranks)],
                            datetime.timedelta(seconds=min(left_s, WAIT_SLICE_S)))
        except RuntimeError:
            pass  # a slice ran out: the caller checks its deadline

    def _adopted_slotted(self, n: int) -> None:
        if self.plan.num_slots > 1:  # one slot: nothing to free, the next version waits for a pause
            self._left_slot_slotted(f"adopted/{n}/{self.rank}")  # slot (n+1) % 2 is free again
