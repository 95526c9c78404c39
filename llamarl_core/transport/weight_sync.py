"""Weight sync trainer -> generators after every optimizer step (LlamaRL §4.3, DDMA).

The trainer's rank 0 holds the full state dict; every generator rank holds a model
whose parameters must change *in place* (the generation engine keeps references).
Both sides derive one bucket layout from the same ``named_shapes``
(``weight_sync_layout``): a few large flat byte buffers, floating tensors cast to
``wire_dtype`` on the way (bf16/fp16, or int8 with per-row scales for matrices). Two transports move the buckets:

- ``"collective"``: a version tensor then one ``dist.broadcast`` per bucket over
  ``group`` (trainer rank 0 + all generator ranks). Gloo on CPU, NCCL on GPU: the
  path that scales across hosts. Each bucket travels as ~8 pieces of whole tensors,
  posted asynchronously, so the trainer packs piece k+1 while piece k is on the
  wire and a generator unpacks piece k while piece k+1 arrives.
- ``"shm"`` (same host): the trainer writes the buckets once into ``/dev/shm``
  mappings (``shm.py``); each generator copies them straight into its parameters.
  Two slots alternate by send parity; the version is published with
  ``store.set`` after the bytes are written and every reader acknowledges with a
  store key, and a slot is rewritten only once all readers acknowledged the send
  that last used it. So a reader never sees a half-written slot, and the trainer
  may run up to two versions ahead of the slowest generator without waiting.

Construction is itself collective over ``group``: the sender broadcasts its layout
(and, for ``shm``, the buffer names), every receiver compares it with its own and
maps the buffers, and all sides exchange a verdict, so a mismatch fails on *every*
rank with the name of the offending tensor, before any weights move.

Every send/receive returns ``SyncStats`` (seconds, bytes, GB/s) and logs it.
"""

from __future__ import annotations

import datetime
import logging
import secrets
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from llamarl_core.transport import shm
from llamarl_core.transport.weight_sync_layout import (
    BucketLayout,
    NamedShapes,
    build_layout,
    check_tensors,
    describe_mismatch,
    direct_bytes,
    pack_bucket,
    pack_slots,
    pieces,
    unpack_bucket,
    unpack_slots,
)

log = logging.getLogger(__name__)

TRANSPORTS = ("collective", "shm")
NUM_SHM_SLOTS = 2
DEFAULT_TIMEOUT_S = 600.0


@dataclass
class SyncStats:
    version: int
    seconds: float  # moving the bytes; excludes waiting for the peer (see wait_seconds)
    bytes: int  # payload bytes on the wire (after wire-dtype conversion)
    gbps: float  # bytes / seconds / 1e9
    transport: str
    num_buckets: int
    wait_seconds: float = 0.0  # blocked on the peer: version not yet sent / readers not done


def _stats(version: int, seconds: float, layout: BucketLayout, transport: str, wait_s: float, role: str) -> SyncStats:
    nbytes = layout.total_nbytes
    gbps = nbytes / max(seconds, 1e-9) / 1e9
    stats = SyncStats(version, seconds, nbytes, gbps, transport, layout.num_buckets, wait_s)
    log.info(
        "weight_sync/%s version=%d transport=%s bytes=%d buckets=%d seconds=%.4f gbps=%.3f wait_seconds=%.4f",
        role, version, transport, nbytes, layout.num_buckets, seconds, stats.gbps, wait_s,
    )
    return stats


def _is_timeout(err: BaseException) -> bool:
    text = str(err).lower()
    return "timed out" in text or "timeout" in text


class _Endpoint:
    """What sender and receiver share: config checks, layout, handshake."""

    role = ""

    def __init__(self, named_shapes: NamedShapes, *, transport: str, group, src_rank: int, store,
                 run_id: str, bucket_mb: float, wire_dtype: torch.dtype | None):
        if transport not in TRANSPORTS:
            raise ValueError(f"weight sync transport must be one of {TRANSPORTS}, got {transport!r}")
        if transport == "shm" and store is None:
            raise ValueError("weight sync transport 'shm' needs a store (versions and acks travel as store keys)")
        if not dist.is_initialized():
            raise RuntimeError("weight sync needs an initialised torch.distributed process group")
        ranks = dist.get_process_group_ranks(group) if group is not None else list(range(dist.get_world_size()))
        if src_rank not in ranks:
            raise ValueError(f"weight sync src_rank={src_rank} is not in the group {ranks}")
        self.transport, self.group, self.src_rank, self.store = transport, group, src_rank, store
        self.run_id = run_id
        self.layout = build_layout(named_shapes, bucket_mb=bucket_mb, wire_dtype=wire_dtype)
        self.num_receivers = len(ranks) - 1
        self.receiver_ranks = [r for r in ranks if r != src_rank]  # global ranks
        self.last_version: int | None = None
        self._seq = 0  # sends/receives done so far
        self._closed = False
        self._bufs: dict[int, torch.Tensor] = {}  # collective: bucket -> staging buffer, made on first use

    def _buf(self, bucket: int, device: torch.device) -> torch.Tensor:
        """Staging buffer for ``bucket`` on the tensors' device (CPU for gloo, CUDA for NCCL)."""
        buf = self._bufs.get(bucket)
        if buf is None or buf.device != device:
            buf = self._bufs[bucket] = torch.empty(self.layout.bucket_nbytes[bucket], dtype=torch.uint8, device=device)
        return buf

    def _verdict(self, error: str) -> None:
        """All group members share their error (if any); every one raises the first."""
        errors: list = [None] * (self.num_receivers + 1)
        dist.all_gather_object(errors, (dist.get_rank(), error), group=self.group)
        bad = [(r, e) for r, e in errors if e]
        if bad:
            rank, text = bad[0]
            raise ValueError(f"weight sync setup failed on global rank {rank}: {text}")

    def _wait(self, work, deadline: float, timeout_s: float, what: str) -> None:
        try:
            work.wait(timeout=datetime.timedelta(seconds=max(deadline - time.perf_counter(), 0.001)))
        except RuntimeError as e:
            if _is_timeout(e):  # a timed-out collective leaves the group unusable: treat as fatal
                raise self._timeout_error(timeout_s, what) from e
            raise

    def _awaited(self) -> str:
        if self.last_version is None:
            return "waiting for the first weight version"
        return f"waiting for weight version > {self.last_version}"

    def _timeout_error(self, timeout_s: float, what: str) -> TimeoutError:
        after = "none yet" if self.last_version is None else self.last_version
        return TimeoutError(
            f"weight sync ({self.role}) timed out after {timeout_s:.1f} s over transport "
            f"'{self.transport}' {what} (send #{self._seq}; last version synced: {after})"
        )


class WeightSyncSender(_Endpoint):
    """Trainer rank 0: pushes the full state dict to every generator rank.

    Ordering contract (all members of ``group``)::

        trainer rank 0 (src)                      each generator rank
        ---------------------------------------   ----------------------------------------
        WeightSyncSender(named_shapes, ...)    <->  WeightSyncReceiver(named_shapes, ...)
        for v in optimizer steps (increasing):        (collective handshake, same order)
            send(state_v, v)                   <->  receive(params)   # once per send, in order
        close()                                     close()

    - ``collective``: every ``send`` is matched by exactly one ``receive`` on every
      generator, issued in the same order as any other collective on ``group``; the
      broadcasts block until all members arrive.
    - ``shm``: ``send`` returns once the bytes are written and the version is
      published; it blocks only when a slot is still being read (the trainer is two
      versions ahead of the slowest generator). Each generator must still ``receive``
      every version, in order.
    Both sides pass the *same* ``named_shapes`` (the trainer's); receivers' parameter
    dtypes may differ (e.g. bf16 generators), the copy converts.
    """

    role = "sender"

    def __init__(self, named_shapes: NamedShapes, *, transport: str, group, src_rank: int, store=None,
                 run_id: str = "", bucket_mb: float, wire_dtype: torch.dtype | None = None):
        super().__init__(named_shapes, transport=transport, group=group, src_rank=src_rank, store=store,
                         run_id=run_id, bucket_mb=bucket_mb, wire_dtype=wire_dtype)
        if dist.get_rank() != src_rank:
            raise ValueError(f"WeightSyncSender must run on src_rank={src_rank}, this is rank {dist.get_rank()}")
        self._paths: list[str] = []
        self._key = f"{run_id}/weights/{secrets.token_hex(4)}"
        sizes = self.layout.bucket_nbytes
        try:
            hello = {"spec": self.layout.spec(), "transport": transport, "key": self._key, "error": ""}
            try:
                if transport == "shm":
                    self._paths = shm.new_paths(run_id, NUM_SHM_SLOTS * len(sizes))
                    flat = [shm.create(p, sizes[i % len(sizes)]) for i, p in enumerate(self._paths)]
                    self._slots = [flat[k * len(sizes):(k + 1) * len(sizes)] for k in range(NUM_SHM_SLOTS)]
            except OSError as e:  # tell the receivers before failing, or they would wait forever
                hello["error"] = str(e)
            hello["paths"] = self._paths
            dist.broadcast_object_list([hello], src=src_rank, group=group)
            if hello["error"]:
                raise OSError(f"weight sync setup failed on the trainer: {hello['error']}")
            self._verdict("")
        finally:
            shm.unlink(self._paths)  # every reader has mapped them (or setup failed): drop the names

    def send(self, state: dict[str, torch.Tensor], version: int, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> SyncStats:
        if self._closed:
            raise RuntimeError("WeightSyncSender.send after close()")
        if self.last_version is not None and version <= self.last_version:
            raise ValueError(f"weight versions must increase: sending {version} after {self.last_version}")
        check_tensors(self.layout, state, side="sender state")
        with torch.no_grad():
            if self.transport == "collective":
                seconds, wait_s = self._send_collective(state, version, timeout_s)
            else:
                seconds, wait_s = self._send_shm(state, version, timeout_s)
        self.last_version = version
        self._seq += 1
        return _stats(version, seconds, self.layout, self.transport, wait_s, self.role)

    def _send_collective(self, state, version: int, timeout_s: float) -> tuple[float, float]:
        device = next(iter(state.values())).device
        t_wait = time.perf_counter()
        deadline = t_wait + timeout_s
        what = f"waiting for the generators to take weight version {version}"
        header = torch.tensor([version], dtype=torch.int64, device=device)
        work = dist.broadcast(header, src=self.src_rank, group=self.group, async_op=True)
        self._wait(work, deadline, timeout_s, what)
        t0 = time.perf_counter()
        works = []
        for b in range(self.layout.num_buckets):
            wire = direct_bytes(self.layout, b, state)
            if wire is not None:
                works.append(dist.broadcast(wire, src=self.src_rank, group=self.group, async_op=True))
                continue
            buf = self._buf(b, device)
            for start, end, slots in pieces(self.layout, b):  # pack piece k+1 while piece k is on the wire
                pack_slots(self._bufs, slots, state)
                works.append(dist.broadcast(buf[start:end], src=self.src_rank, group=self.group, async_op=True))
        for w in works:
            self._wait(w, deadline, timeout_s, what)
        return time.perf_counter() - t0, t0 - t_wait

    def _send_shm(self, state, version: int, timeout_s: float) -> tuple[float, float]:
        n, slot = self._seq, self._seq % NUM_SHM_SLOTS
        t_wait = time.perf_counter()
        if n >= NUM_SHM_SLOTS:  # wait until every reader is done with the send that last used this slot
            old = n - NUM_SHM_SLOTS
            acks = [f"{self._key}/ack/{old}/{r}" for r in self.receiver_ranks]
            try:
                self.store.wait(acks, datetime.timedelta(seconds=timeout_s))
            except RuntimeError as e:
                if _is_timeout(e):
                    raise self._timeout_error(timeout_s, f"waiting for generators to finish reading send #{old} "
                                              f"before writing version {version}") from e
                raise
            for k in [*acks, f"{self._key}/seq/{old}"]:
                self.store.delete_key(k)
        t0 = time.perf_counter()
        for b in range(self.layout.num_buckets):
            pack_bucket(self.layout, self._slots[slot], b, state)
        self.store.set(f"{self._key}/seq/{n}", str(version))  # publish only after the bytes are written
        return time.perf_counter() - t0, t0 - t_wait

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        shm.unlink(self._paths)
        self._slots, self._bufs = None, {}  # drop mappings / buffers


class WeightSyncReceiver(_Endpoint):
    """Generator rank: copies each version into its parameters in place.

    See ``WeightSyncSender`` for the ordering contract: one ``receive`` per ``send``,
    in order, on every generator rank of ``group``.
    """

    role = "receiver"

    def __init__(self, named_shapes: NamedShapes, *, transport: str, group, src_rank: int, store=None,
                 run_id: str = "", bucket_mb: float, wire_dtype: torch.dtype | None = None):
        super().__init__(named_shapes, transport=transport, group=group, src_rank=src_rank, store=store,
                         run_id=run_id, bucket_mb=bucket_mb, wire_dtype=wire_dtype)
        if dist.get_rank() == src_rank:
            raise ValueError(f"WeightSyncReceiver cannot run on the sender's rank {src_rank}")
        hello: list = [None]
        dist.broadcast_object_list(hello, src=src_rank, group=group)
        hello = hello[0]
        self._key = hello["key"]
        if hello["error"]:
            raise OSError(f"weight sync setup failed on the trainer (global rank {src_rank}): {hello['error']}")
        if hello["transport"] != transport:
            error = f"transport differs: trainer uses {hello['transport']!r}, this generator {transport!r}"
        else:
            error = describe_mismatch(self.layout.spec(), hello["spec"], ours_label="generator",
                                      theirs_label="trainer") or ""
        if not error:
            sizes = self.layout.bucket_nbytes
            try:
                if transport == "shm":
                    flat = [shm.open_existing(p, sizes[i % len(sizes)]) for i, p in enumerate(hello["paths"])]
                    self._slots = [flat[k * len(sizes):(k + 1) * len(sizes)] for k in range(NUM_SHM_SLOTS)]
            except (OSError, ValueError) as e:
                error = str(e)
        self._verdict(error)

    def receive(self, params: dict[str, torch.Tensor], timeout_s: float = DEFAULT_TIMEOUT_S) -> SyncStats:
        """Block until the next version arrives, copy it into ``params``; returns its stats."""
        if self._closed:
            raise RuntimeError("WeightSyncReceiver.receive after close()")
        check_tensors(self.layout, params, side="generator params")
        with torch.no_grad():
            if self.transport == "collective":
                version, seconds, wait_s = self._receive_collective(params, timeout_s)
            else:
                version, seconds, wait_s = self._receive_shm(params, timeout_s)
        if self.last_version is not None and version <= self.last_version:
            raise RuntimeError(f"weight version {version} arrived after {self.last_version}: out of order")
        self.last_version = version
        self._seq += 1
        return _stats(version, seconds, self.layout, self.transport, wait_s, self.role)

    def _receive_collective(self, params, timeout_s: float) -> tuple[int, float, float]:
        device = next(iter(params.values())).device
        t_wait = time.perf_counter()
        deadline = t_wait + timeout_s
        header = torch.zeros(1, dtype=torch.int64, device=device)
        self._wait(dist.broadcast(header, src=self.src_rank, group=self.group, async_op=True),
                   deadline, timeout_s, self._awaited())
        version = int(header.item())
        t0 = time.perf_counter()
        posted = []  # (bucket, work, slots to unpack once it arrives)
        for b in range(self.layout.num_buckets):
            wire = direct_bytes(self.layout, b, params)  # lands straight in the parameter
            if wire is not None:
                posted.append((b, dist.broadcast(wire, src=self.src_rank, group=self.group, async_op=True), []))
                continue
            buf = self._buf(b, device)
            for start, end, slots in pieces(self.layout, b):
                posted.append((b, dist.broadcast(buf[start:end], src=self.src_rank, group=self.group,
                                                 async_op=True), slots))
        for b, work, slots in posted:  # unpack piece k while later pieces arrive
            self._wait(work, deadline, timeout_s, f"receiving bucket {b} of weight version {version}")
            unpack_slots(self._bufs, slots, params)
        return version, time.perf_counter() - t0, t0 - t_wait

    def _receive_shm(self, params, timeout_s: float) -> tuple[int, float, float]:
        n, slot = self._seq, self._seq % NUM_SHM_SLOTS
        key = f"{self._key}/seq/{n}"
        t_wait = time.perf_counter()
        try:
            self.store.wait([key], datetime.timedelta(seconds=timeout_s))
        except RuntimeError as e:
            if _is_timeout(e):
                raise self._timeout_error(timeout_s, self._awaited()) from e
            raise
        version = int(self.store.get(key))
        t0 = time.perf_counter()
        for b in range(self.layout.num_buckets):
            unpack_bucket(self.layout, self._slots[slot], b, params)
        seconds = time.perf_counter() - t0
        self.store.set(f"{self._key}/ack/{n}/{dist.get_rank()}", b"1")  # slot may be rewritten now
        return version, seconds, t0 - t_wait

    def close(self) -> None:
        self._closed = True
        self._slots, self._bufs = None, {}


__all__ = ["SyncStats", "WeightSyncSender", "WeightSyncReceiver", "TRANSPORTS"]
