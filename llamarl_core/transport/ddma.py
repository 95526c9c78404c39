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
"""
from __future__ import annotations

import contextlib
import datetime
import json
import threading
import time
from dataclasses import dataclass
from itertools import zip_longest

import torch
import torch.distributed as dist

from llamarl_core.config.choices import DDMA_TRANSPORTS
from llamarl_core.transport import cuda_ipc, shm
from llamarl_core.transport.membership import MembershipChanged
from llamarl_core.transport.ddma_plan import (DdmaPlan, dst_block, fp8_rows, scale_name, scale_view, src_block,
                                              tensor_view)

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


RECV_POLL_S = 0.0002  # NCCL receives: how often the receiving thread looks at its works


def _on(stream):
    """`torch.cuda.stream(stream)`, or nothing on the CPU."""
    return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()


def transfer_store(store, epoch: int):
    return dist.PrefixStore(f"xfer/{epoch}", store)


def _wait_keys(store, keys: list[str], timeout_s: float, what: str, interrupt=None) -> None:
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


class _Endpoint:
    role = ""

    interrupt = None  # the sender's restart watch (see _wait_keys)

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
        _wait_keys(self.store, ["spec"], self.timeout_s, "waiting for trainer rank 0's plan", self.interrupt)
        theirs = json.loads(self.store.get("spec"))
        ours = json.loads(json.dumps(self.plan.spec()))
        if not error and theirs != ours:
            error = _describe(ours, theirs)
        self.store.set(f"verdict/{me}", error)
        keys = [f"verdict/{m}" for m in range(self.members)]
        _wait_keys(self.store, keys, self.timeout_s, "waiting for every member's handshake", self.interrupt)
        for m in range(self.members):
            text = self.store.get(f"verdict/{m}").decode()
            if text:
                who = f"trainer rank {m}" if m < self.plan.trainer_ranks else \
                    f"generator rank {m - self.plan.trainer_ranks}"
                raise ValueError(f"DDMA weight sync setup failed on {who}: {text}")

    def _make_pg(self, device: torch.device):
        timeout = datetime.timedelta(seconds=self.timeout_s)
        pg_store = dist.PrefixStore("pg", self.store)
        if device.type == "cuda":
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = timeout  # NCCL's own default is 10 minutes, whatever step_timeout_s says
            return dist.ProcessGroupNCCL(pg_store, self._member(), self.members, options)
        return dist.ProcessGroupGloo(pg_store, self._member(), self.members, timeout)

    def _warm_up(self, peers: range, device: torch.device) -> list[int]:
        """One element to and from every peer, in (trainer, generator) order on every member:
        NCCL forms each pair's communicator here, not in the middle of a decode loop. Returns
        what each peer sent (its member index + 1)."""
        got = []
        for peer in peers:
            mine = torch.tensor([self._member() + 1], dtype=torch.int64, device=device)
            theirs = torch.zeros(1, dtype=torch.int64, device=device)
            ops = [(self.pg.send, mine), (self.pg.recv, theirs)]
            for op, t in (ops if self.role == "trainer" else ops[::-1]):
                self._wait_work(op([t], peer, 0), f"warming up the link to member {peer}")
            got.append(int(theirs.item()))
        return got

    def _wait_work(self, work, what: str) -> None:
        try:
            work.wait(datetime.timedelta(seconds=self.timeout_s))
        except RuntimeError as e:
            if "timeout" in str(e).lower() or "timed out" in str(e).lower():
                raise TimeoutError(f"DDMA weight sync ({self.role} rank {self.rank}) timed out after "
                                   f"{self.timeout_s:.1f} s {what}") from e
            raise

    def _stats(self, version: int, seconds: float, nbytes: int, wait_s: float) -> SyncStats:
        return SyncStats(version, seconds, nbytes, nbytes / max(seconds, 1e-9) / 1e9, self.transport, wait_s)


def _open_slots(transport: str, published: bytes, nbytes: int) -> list[torch.Tensor]:
    """A generator's slots as its store key describes them: shm paths or CUDA IPC handles.

    Both are JSON and checked before use: nothing read from the store is unpickled
    (cuda_ipc.from_json)."""
    if transport == "shm":
        return [shm.open_existing(p, nbytes) for p in json.loads(published)]
    slots = cuda_ipc.open_shared(cuda_ipc.from_json(published, nbytes))
    if any(s.numel() != nbytes for s in slots):
        raise ValueError(f"CUDA IPC slots have {[s.numel() for s in slots]} bytes, the plan needs {nbytes}")
    return slots


class DdmaSender(_Endpoint):
    """Trainer rank ``rank``: sends the blocks of its FSDP shard that each generator needs."""

    role = "trainer"

    def __init__(self, plan: DdmaPlan, rank: int, *, transport: str, store, epoch: int = 0,
                 device: torch.device | str = "cpu", timeout_s: float = 600.0, interrupt=None):
        super().__init__(plan, rank, transport=transport, store=store, epoch=epoch, timeout_s=timeout_s)
        self.interrupt = interrupt  # () -> bool: True once the generators of `epoch` were replaced
        self.device = torch.device(device)
        self.links = [plan.pieces_between(rank, g) for g in range(plan.generator_ranks)]
        self.nbytes = sum(plan.link_nbytes(rank, g) for g in range(plan.generator_ranks))
        self._slots: list[list[torch.Tensor]] = []
        error = ""
        if transport in SLOTTED:
            try:  # generators created their slots before the handshake
                _wait_keys(self.store, [f"slots/{g}" for g in range(plan.generator_ranks)], timeout_s,
                           "waiting for the generators' slots", interrupt)
                for g in range(plan.generator_ranks):
                    self._slots.append(_open_slots(transport, self.store.get(f"slots/{g}"), plan.slot_nbytes[g]))
            except (OSError, ValueError, RuntimeError) as e:
                error = str(e)
        self._handshake(error)
        self.warmed_up: list[int] = []
        if transport == "collective":
            self.pg = self._make_pg(self.device)
            T = plan.trainer_ranks
            self.warmed_up = self._warm_up(range(T, T + plan.generator_ranks), self.device)
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
            _wait_keys(self.store, keys, self.timeout_s, f"waiting for the generators to {what} "
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

    def _send_collective(self, local, version: int) -> float:
        T = self.plan.trainer_ranks
        self.store.set(f"sending/{self.seq}/{self.rank}", str(version))  # the generators post their receives
        works: list = []
        temp_work, waited = [None, None], set()  # a gloo work must be waited on only once
        keep: list = []
        k = 0
        for row in zip_longest(*[[(g, p) for p in ps] for g, ps in enumerate(self.links)]):
            for item in row:  # round-robin over generators: every link busy at once
                if item is None:
                    continue
                g, p = item
                src = src_block(local[p.name], p)
                if p.name in self.plan.fp8_names:  # fresh tensors, kept until their sends are waited
                    q, scales = fp8_rows(src, self.plan.dtype)
                    keep.append((q, scales))
                    works += [self.pg.send([q.view(torch.uint8).reshape(-1)], T + g, 0),
                              self.pg.send([scales], T + g, 0)]
                    continue
                if p.src_contiguous and src.dtype == self.plan.dtype and src.is_contiguous():
                    works.append(self.pg.send([src.reshape(-1)], T + g, 0))  # straight from the shard
                    continue
                i, k = k % 2, k + 1
                if temp_work[i] is not None:
                    self._wait_work(temp_work[i], f"sending weight version {version}")
                    waited.add(id(temp_work[i]))
                buf = self._temps[i][:p.numel * self.plan.dtype.itemsize].view(self.plan.dtype)
                buf.view(src.shape).copy_(src)
                temp_work[i] = self.pg.send([buf], T + g, 0)
                works.append(temp_work[i])
        for w in (w for w in works if id(w) not in waited):  # includes any wait for a generator two
            self._wait_work(w, f"sending weight version {version} (a generator not receiving?)")  # versions behind
        return 0.0

    def close(self) -> None:
        """Collective: tell every generator's receiving thread to stop (a send announced with
        no pieces); a generator that stopped receiving is not waited for."""
        if self.pg is not None:
            try:
                self.store.set(f"sending/{self.seq}/{self.rank}", str(CLOSE_VERSION))
            except RuntimeError:  # the store's host is gone: so are the generators
                pass
        self._slots, self._temps = [], []


CLOSE_VERSION = -1  # announcing this ends a generator's receiving thread


class _Inbox:
    """The generator's receiving thread (collective transport), one send after another.

    For send n it waits until slot n % 2 is free and every trainer announced n, receives
    every piece straight into the slot, and marks n ready. A thread because gloo marks a
    receive complete only inside ``wait()`` (the bytes land in the background), and a decode
    step must never block; the GIL is released while it waits. ``arrived`` wakes a blocking
    ``receive()`` at once (no poll sleep).
    """

    def __init__(self, announced, recv_send, timeout_s: float, num_slots: int):
        self.announced_fn, self.recv_send, self.timeout_s = announced, recv_send, timeout_s
        # Two slots: both free until the first adoption. One: free once receive() paused decoding.
        self.free = threading.Semaphore(num_slots if num_slots > 1 else 0)
        self.announced = -1  # the newest send every trainer announced
        self.ready: dict[int, int] = {}  # send # → version
        self.left: dict[int, object] = {}  # slot → CUDA event: the computation on it has been queued
        self.arrived = threading.Condition()
        self.error: BaseException | None = None
        self.closed = False
        self._thread = threading.Thread(target=self._run, daemon=True, name="ddma-inbox")

    def start(self) -> "_Inbox":
        self._thread.start()
        return self

    def _run(self) -> None:
        n = 0
        try:
            while not self.closed:
                version = self.announced_fn(n)
                if version is None or version == CLOSE_VERSION:
                    return
                self.announced = n
                while not self.free.acquire(timeout=0.1):
                    if self.closed:
                        return
                self.recv_send(n)
                if self.closed:
                    return
                with self.arrived:
                    self.ready[n] = version
                    self.arrived.notify_all()
                n += 1
        except BaseException as e:  # reported by the generator's next poll
            with self.arrived:
                self.error = e
                self.arrived.notify_all()


class DdmaReceiver(_Endpoint):
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
            if transport == "shm":
                self._paths = shm.new_paths(run_id, plan.num_slots)
                self.slots = [shm.create(p, plan.slot_nbytes[rank]) for p in self._paths]
            elif transport == "cuda_ipc":  # kept alive by self.slots while trainers map them
                self.slots = cuda_ipc.create([plan.slot_nbytes[rank]] * plan.num_slots, device)
            else:
                self.slots = [torch.zeros(plan.slot_nbytes[rank], dtype=torch.uint8, device=device)
                              for _ in range(plan.num_slots)]
        except OSError as e:
            error, self._paths, self.slots = str(e), [], []
        if transport == "shm":
            self.store.set(f"slots/{rank}", json.dumps(self._paths))
        elif transport == "cuda_ipc":
            self.store.set(f"slots/{rank}", cuda_ipc.to_json(cuda_ipc.share(self.slots)))
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
            self.pg = self._make_pg(device)
            with _on(self.stream):
                self.warmed_up = self._warm_up(range(plan.trainer_ranks), device)
            self._inbox = _Inbox(self._announced, self._recv_send, timeout_s, plan.num_slots)
            self._inbox.start()

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

    def _announced(self, n: int) -> int | None:
        """(Receiving thread) the version every trainer announced for send ``n``; None once closed."""
        T = self.plan.trainer_ranks
        keys = [f"sending/{n}/{t}" for t in range(T)]
        while not self._inbox.closed:
            try:
                self.store.wait(keys, datetime.timedelta(seconds=WAIT_SLICE_S))
                break
            except RuntimeError as e:  # a slice ran out: look at `closed`, wait again
                if "timeout" not in str(e).lower() and "timed out" not in str(e).lower():
                    raise
        else:
            return None
        versions = {int(self.store.get(k)) for k in keys}
        if len(versions) != 1:
            raise RuntimeError(f"DDMA send #{n}: trainer ranks announced different versions {sorted(versions)}")
        return versions.pop()

    def _recv_send(self, n: int) -> None:
        """(Receiving thread) send ``n``, announced and its slot free: every piece in place."""
        k = self.plan.num_slots
        view, works = self.views[n % k], []
        with _on(self.stream):
            left = self._inbox.left.pop(n % k, None)
            if left is not None:  # the decode steps queued on this slot read it before it is overwritten
                self.stream.wait_event(left)
            for t in range(self.plan.trainer_ranks):  # in each trainer's send order: per piece its rows (and scales)
                for p in self.plan.pieces_between(t, self.rank):
                    if p.name in self.plan.fp8_names:
                        works += [self.pg.recv([dst_block(view[p.name], p).view(torch.uint8).reshape(-1)], t, 0),
                                  self.pg.recv([view[scale_name(p.name)][p.dst_rows[0]:p.dst_rows[1]]], t, 0)]
                    else:
                        works.append(self.pg.recv([dst_block(view[p.name], p).reshape(-1)], t, 0))
            self._complete(works, n)

    def _complete(self, works: list, n: int) -> None:
        """Until every receive of send ``n`` has landed. gloo completes a work only inside
        wait(); NCCL's wait() would only make a stream wait, so its works are polled."""
        if self.stream is None:
            for w in works:
                self._wait_work(w, f"receiving send #{n}")
            return
        deadline = time.monotonic() + self.timeout_s
        while not all(w.is_completed() for w in works):
            if self._inbox.closed:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"DDMA weight sync (generator rank {self.rank}) timed out after "
                                   f"{self.timeout_s:.1f} s receiving send #{n}")
            time.sleep(RECV_POLL_S)

    def _ready(self) -> int | None:
        """The version of send #seq if it has fully arrived, else None (never blocks)."""
        n = self.seq
        if self.transport in SLOTTED:
            keys = [f"done/{n}/{t}" for t in range(self.plan.trainer_ranks)]
            if not self.store.check(keys):
                return None
            versions = {int(self.store.get(k)) for k in keys}
        else:
            if self._inbox.error is not None:
                raise RuntimeError(f"DDMA weight sync (generator rank {self.rank}): receiving send #{n} "
                                   f"failed: {self._inbox.error}") from self._inbox.error
            return self._inbox.ready.get(n)
        if len(versions) != 1:
            raise RuntimeError(f"DDMA send #{n}: trainer ranks sent different versions {sorted(versions)}")
        return versions.pop()

    def ready(self) -> bool:
        """Whether ``receive()`` has a version to take now: it has fully arrived (two slots),
        or the trainers wait to write it (one slot: ``receive()`` pauses decoding for it)."""
        if self.plan.num_slots > 1:
            return self._ready() is not None
        if self.transport in SLOTTED:
            return self.store.check([f"want/{self.seq}/0"])
        self._ready()  # raises the receiving thread's error
        return self._inbox.announced >= self.seq

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
            if self.transport == "cuda_ipc":
                cuda_ipc.fence()  # kernels queued on the slot have read it before it is rewritten
            self.store.set(f"free/{n}/{self.rank}", b"1")
            return
        if self.stream is not None:
            left = torch.cuda.Event()
            left.record()
            self._inbox.left[0] = left
        self._inbox.free.release()

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
                try:
                    self.store.wait([f"done/{self.seq}/{t}" for t in range(self.plan.trainer_ranks)],
                                    datetime.timedelta(seconds=min(left, WAIT_SLICE_S)))
                except RuntimeError:
                    pass  # a slice ran out: check the deadline
            else:
                with self._inbox.arrived:
                    if self.seq not in self._inbox.ready and self._inbox.error is None:
                        self._inbox.arrived.wait(timeout=min(left, WAIT_SLICE_S))
        t1 = time.perf_counter()
        return self._adopt(version, t1, t1 - t0)

    def _adopt(self, version: int, t0: float, wait_s: float) -> SyncStats:
        if self.last_version is not None and version <= self.last_version:
            raise RuntimeError(f"weight version {version} arrived after {self.last_version}: out of order")
        n, k = self.seq, self.plan.num_slots
        view = self.views[n % k]
        for name, p in self.params.items():
            p.data = view[name]  # the swap: compute from the slot the trainers just filled
        self.seq, self.last_version = n + 1, version
        if k == 1:  # nothing to free: the next version waits for the next pause
            if self.transport not in SLOTTED:
                self._inbox.ready.pop(n, None)
        elif self.transport in SLOTTED:
            if self.transport == "cuda_ipc":
                cuda_ipc.fence()  # kernels queued on the old slot have read it before it is rewritten
            self.store.set(f"adopted/{n}/{self.rank}", b"1")  # slot (n+1) % 2 is free again
        else:
            self._inbox.ready.pop(n, None)
            if n >= 1:  # slot (n+1) % 2 is free again (both were free before the first adoption)
                if self.stream is not None:  # once the decode steps queued until now have read it
                    left = torch.cuda.Event()
                    left.record()
                    self._inbox.left[(n + 1) % k] = left
                self._inbox.free.release()
        return self._stats(version, time.perf_counter() - t0, self.nbytes, wait_s)

    def close(self) -> None:
        shm.unlink(self._paths)
        if self._inbox is not None:
            self._inbox.closed = True
            self._inbox._thread.join(timeout=2 * WAIT_SLICE_S)  # ends at its next wait slice
