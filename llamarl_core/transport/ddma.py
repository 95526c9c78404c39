"""DDMA weight sync: every trainer rank → the generator ranks that need its rows (LlamaRL §4.3).

Each generator rank owns two *slots*: flat buffers laid out like its (TP-sliced)
parameters in its dtype. Its parameters are views into the slot it computes from; the
other slot is the staging buffer the next version lands in. (With one slot, for a model
whose two copies do not fit, ``resources.generator.weight_slots=1``: the generator pauses at
a decode-step boundary while the trainers rewrite it, ``ready()`` saying they wait.) Each trainer rank writes
(shm) or sends (collective) only the blocks of its own FSDP shard that a generator
needs (``ddma_plan``), converting dtype on the way (or quantizing to fp8 with per-row
scales, for the tensors the plan marks), straight into that generator's staging slot.
So a sync is one copy, nobody materialises the full model, and the bytes leave all
trainer ranks at once.

The generator swaps at a decode-step boundary, whenever it likes: ``poll()`` adopts
a complete version by re-pointing its parameters to the staging slot (no copy), and
only then frees the other slot for the version after. The trainer therefore never
waits for a chunk to finish; it waits only when it is two versions ahead of a
generator that has not reached a decode-step boundary since.

Ordering contract (``n`` counts syncs, the same on every rank)::

    trainer rank t                              generator rank g
    ---------------------------------------     ----------------------------------------
    DdmaSender(plan, t, ...)             <->    DdmaReceiver(plan, g, params, ...)  # handshake
    send(local_shards, version) per step        poll() between decode steps → stats | None
                                                receive() = poll until adopted (blocking)
    close()                                     close()

Transports. ``shm`` (one host): the generator creates its slots in ``/dev/shm``, every
trainer rank maps them and writes its pieces; ``done/{n}/{t}`` publishes a trainer's
part of send ``n``, ``adopted/{n}/{g}`` frees the slot a generator left. ``collective``:
point-to-point sends on a process group of the T + G members (gloo on CPU, NCCL on
GPU): trainer t announces send ``n`` in the store (``sending/{n}/{t}`` = its version) and
sends its pieces; a generator's receiving thread, once the staging slot is free and every
trainer announced ``n``, posts its receives straight into the slot. Nothing is posted
across the trainer's eval or checkpoint gaps, so no NCCL timeout can fire there; the
groups' timeout is ``controller.step_timeout_s`` (NCCL's default of 10 minutes otherwise).

Streams and stores (what a GPU needs that gloo forgives): each endpoint is handed a store
client of its own (``executors/weights.py``): the receiving thread waits in it, and a
TCPStore client serialises its callers, so the role loop's client must never be the one.
On CUDA the receiving thread runs on a stream of its own (``Work.wait()`` makes the
*current* stream wait; the default stream is the decode loop's, which would then wait for
a send that needs this decode), learns completion by polling the works, and first waits
(on the GPU) for the event recorded when the slot it overwrites was left. NCCL makes its
communicators lazily, blocking in the store on first use; both constructors therefore
warm up every (trainer, generator) pair with a one-element exchange, in (t, g) order.

``cuda_ipc`` (a generator and a trainer sharing one GPU, ``resources.share_devices``;
NCCL refuses two ranks of one group on a device): ``shm``'s protocol, with the slots in
the generator's GPU memory, mapped by the trainer through CUDA IPC handles
(``cuda_ipc.py``); both sides synchronise the device before publishing a store key.

Membership epochs: all keys and the process group live under
``PrefixStore(f"xfer/{epoch}", store)``; after a restart, build new endpoints with
the next epoch (nothing of the old one is reused).

Files: this one holds the two endpoints; `ddma_endpoint.py` what they share (handshake,
store waits, `SyncStats`); `ddma_slots.py` the shm / cuda_ipc half and `ddma_collective.py`
the point-to-point half of each; `ddma_plan.py` the plan (pure).
"""
from __future__ import annotations

import time

import torch

from llamarl_core.transport import shm
from llamarl_core.transport.ddma_collective import CollectiveReceive, CollectiveSend
from llamarl_core.transport.ddma_endpoint import SLOTTED, TRANSPORTS, Endpoint, SyncStats, transfer_store
from llamarl_core.transport.ddma_plan import DdmaPlan, scale_name, scale_view, tensor_view
from llamarl_core.transport.ddma_slots import SlottedReceive, SlottedSend

__all__ = ["DdmaReceiver", "DdmaSender", "SyncStats", "TRANSPORTS", "transfer_store"]


class DdmaSender(SlottedSend, CollectiveSend, Endpoint):
    """Trainer rank ``rank``: sends the blocks of its FSDP shard that each generator needs."""

    role = "trainer"

    def __init__(self, plan: DdmaPlan, rank: int, *, transport: str, store, epoch: int = 0,
                 device: torch.device | str = "cpu", timeout_s: float = 600.0, interrupt=None,
                 run_id: str = ""):
        super().__init__(plan, rank, transport=transport, store=store, epoch=epoch, timeout_s=timeout_s)
        self.run_id = run_id  # with the epoch, names the generators' shm slots (shm.slot_paths)
        self.interrupt = interrupt  # () -> bool: True once the generators of `epoch` were replaced
        self.device = torch.device(device)
        self.links = [plan.pieces_between(rank, g) for g in range(plan.generator_ranks)]
        self.nbytes = sum(plan.link_nbytes(rank, g) for g in range(plan.generator_ranks))
        self._slots: list[list[torch.Tensor]] = []
        error = self._map_slots() if transport in SLOTTED else ""
        self._handshake(error)
        self.warmed_up: list[int] = []
        if transport == "collective":
            self._connect_collective()
        max_piece = max((p.numel for p in plan.pieces if p.trainer == rank), default=0)
        self._temps = [torch.empty(max_piece * plan.dtype.itemsize, dtype=torch.uint8, device=self.device)
                       for _ in range(2)]  # ≤ 2 pieces of extra memory, each ≤ max_piece_bytes

    def send(self, local: dict[str, torch.Tensor], version: int) -> SyncStats:
        """Send send #seq carrying ``version``; ``local``: this rank's dim-0 shard of every parameter."""
        if self.last_version is not None and version <= self.last_version:
            raise ValueError(f"weight versions must increase: sending {version} after {self.last_version}")
        self._check(local)
        with torch.no_grad():
            t0 = time.perf_counter()
            wait_s = self._send_shm(local, version) if self.transport in SLOTTED else \
                self._send_collective(local, version)
            seconds = time.perf_counter() - t0 - wait_s
        self.seq += 1
        self.last_version = version
        return self._stats(version, seconds, self.nbytes, wait_s)

    def _check(self, local: dict[str, torch.Tensor]) -> None:
        """Every shard this rank sends from has exactly the rows the plan says it owns: a
        shard of other rows (an HSDP replica read as an FSDP shard) would send wrong weights
        of the right shape."""
        for name in sorted({p.name for pieces in self.links for p in pieces}):
            t = local.get(name)
            if t is None:
                raise ValueError(f"DDMA sender (trainer rank {self.rank}): no local shard for '{name}'")
            rows = t.shape[0] if t.dim() else 1
            lo, hi = self.plan.shard_rows(name, self.rank)
            if rows != hi - lo:
                raise ValueError(f"DDMA sender (trainer rank {self.rank}): '{name}' shard has {rows} rows, the plan "
                                 f"gives this rank rows [{lo}, {hi}) of {dict(self.plan.dim0)[name]} "
                                 f"(FSDP shard {self.rank % self.plan.trainer_shards} of "
                                 f"{self.plan.trainer_shards}; not this layout's shard?)")

    def close(self) -> None:
        """Collective: tell every generator's receiving thread to stop; a generator that
        stopped receiving is not waited for."""
        if self.pg is not None:
            self._close_collective()
        self._slots, self._temps = [], []


class DdmaReceiver(SlottedReceive, CollectiveReceive, Endpoint):
    """Generator rank ``rank``: its parameters become views into its two slots."""

    role = "generator"

    def __init__(self, plan: DdmaPlan, rank: int, params: dict[str, torch.Tensor], *, transport: str,
                 store, epoch: int = 0, run_id: str = "", timeout_s: float = 600.0):
        super().__init__(plan, rank, transport=transport, store=store, epoch=epoch, timeout_s=timeout_s)
        self.params = params
        self.tensors = plan.slots[rank]
        device = next(iter(params.values())).device
        error = self._check(params)
        self._paths: list[str] = []
        try:
            self.slots = self._create_slots(run_id, device) if transport in SLOTTED else \
                [torch.zeros(plan.slot_nbytes[rank], dtype=torch.uint8, device=device) for _ in range(plan.num_slots)]
        except OSError as e:
            error, self._paths, self.slots = str(e), [], []
        if transport in SLOTTED:
            self._publish_slots()
        try:
            self._handshake(error)
        finally:
            shm.unlink(self._paths)  # every trainer has mapped them (or setup failed)
        # Views made once, outside any inference_mode, so a swap inside one is a pointer move.
        self.views = [{t.name: tensor_view(s, t, plan.dtype) for t in self.tensors} for s in self.slots]
        for view, slot in zip(self.views, self.slots):  # fp8 on the wire: the per-row scales too
            view.update({scale_name(t.name): scale_view(slot, t) for t in self.tensors if t.fp8})
        self.nbytes = sum(plan.link_nbytes(t, rank) for t in range(plan.trainer_ranks))
        self._inbox = None
        self._paused = -1  # one slot: the send this rank last paused for
        self.warmed_up: list[int] = []
        # CUDA: the receiving thread's own stream (see the module docstring); None on the CPU
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        if transport == "collective":
            self._connect_collective(device)

    def _check(self, params: dict[str, torch.Tensor]) -> str:
        for t in self.tensors:
            p = params.get(t.name)
            if p is None:
                return f"parameter '{t.name}' is missing on this generator"
            want = self.plan.wire_dtype(t.name)
            if tuple(p.shape) != t.shape or p.dtype != want:
                return (f"parameter '{t.name}' has shape {tuple(p.shape)} dtype {p.dtype}, the plan gives "
                        f"this TP rank {t.shape} {want}")
            scales = params.get(scale_name(t.name))
            if t.fp8 and (scales is None or tuple(scales.shape) != t.shape[:1] or scales.dtype != torch.float32):
                return f"fp8 parameter '{t.name}' needs its float32 scales {t.shape[:1]} as '{scale_name(t.name)}'"
        return ""

    def _ready(self) -> int | None:
        """The version of send #seq if it has fully arrived, else None (never blocks)."""
        return self._arrived_slotted() if self.transport in SLOTTED else self._arrived_collective()

    def ready(self) -> bool:
        """Whether ``receive()`` has a version to take now: it has fully arrived (two slots),
        or the trainers wait to write it (one slot: ``receive()`` pauses decoding for it)."""
        if self.plan.num_slots > 1:
            return self._ready() is not None
        return self._wanted_slotted() if self.transport in SLOTTED else self._wanted_collective()

    def poll(self) -> SyncStats | None:
        """At a decode-step boundary: adopt the next version if it has fully arrived (one slot:
        if the trainers wait to write it, pause for it)."""
        t0 = time.perf_counter()
        if self.plan.num_slots == 1:
            return self.receive() if self.ready() else None
        version = self._ready()
        if version is None:
            return None
        return self._adopt(version, t0, 0.0)

    def _pause(self) -> None:
        """One slot: this rank stops computing from it, so the trainers may rewrite it now."""
        n = self.seq
        if self._paused == n:
            return
        self._paused = n
        if self.transport in SLOTTED:
            self._left_slot_slotted(f"free/{n}/{self.rank}")
        else:
            self._left_slot_collective(0)

    def receive(self, timeout_s: float | None = None) -> SyncStats:
        """Block until the next version has arrived, then adopt it (woken by its arrival:
        the store's wait or the receiving thread's notice, no poll sleep)."""
        t0 = time.perf_counter()
        deadline = t0 + (self.timeout_s if timeout_s is None else timeout_s)
        if self.plan.num_slots == 1:
            self._pause()
        while (version := self._ready()) is None:
            left = deadline - time.perf_counter()
            if left <= 0:
                after = "none yet" if self.last_version is None else self.last_version
                raise TimeoutError(f"DDMA weight sync (generator rank {self.rank}) timed out over transport "
                                   f"'{self.transport}' waiting for send #{self.seq} (last version: {after})")
            if self.transport in SLOTTED:
                self._wait_slotted(left)
            else:
                self._wait_collective(left)
        t1 = time.perf_counter()
        return self._adopt(version, t1, t1 - t0)

    def _adopt(self, version: int, t0: float, wait_s: float) -> SyncStats:
        if self.last_version is not None and version <= self.last_version:
            raise RuntimeError(f"weight version {version} arrived after {self.last_version}: out of order")
        n = self.seq
        view = self.views[n % self.plan.num_slots]
        for name, p in self.params.items():
            p.data = view[name]  # the swap: compute from the slot the trainers just filled
        self.seq, self.last_version = n + 1, version
        if self.transport in SLOTTED:
            self._adopted_slotted(n)
        else:
            self._adopted_collective(n)
        return self._stats(version, time.perf_counter() - t0, self.nbytes, wait_s)

    def close(self) -> None:
        shm.unlink(self._paths)
        self._close_collective()
