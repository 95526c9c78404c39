"""DDMA's ``collective`` transport: point-to-point sends on a process group of the T + G members
(gloo on CPU, NCCL on GPU; any number of hosts).

Trainer t announces send ``n`` in the store (``sending/{n}/{t}`` = its version) and sends its
pieces; a generator's receiving thread (`_Inbox`), once the staging slot is free and every
trainer announced ``n``, posts its receives straight into the slot. Nothing is posted across
the trainer's eval or checkpoint gaps, so no NCCL timeout can fire there; the groups' timeout
is ``controller.step_timeout_s`` (NCCL's default of 10 minutes otherwise). On CUDA the
receiving thread runs on a stream of its own and learns completion by polling the works
(``ddma.py``'s docstring says why); NCCL makes its communicators lazily, so both ends warm up
every (trainer, generator) pair with a one-element exchange, in (t, g) order.

Mixins of `ddma.DdmaSender` / `ddma.DdmaReceiver` (which pick this half when
``transport == "collective"``).
"""
from __future__ import annotations

import contextlib
import datetime
import threading
import time
from itertools import zip_longest

import torch
import torch.distributed as dist

from llamarl_core.transport.ddma_endpoint import WAIT_SLICE_S, agreed_version
from llamarl_core.transport.ddma_plan import dst_block, fp8_rows, scale_name, src_block

RECV_POLL_S = 0.0002  # NCCL receives: how often the receiving thread looks at its works
CLOSE_VERSION = -1  # announcing this ends a generator's receiving thread


def _on(stream):
    """`torch.cuda.stream(stream)`, or nothing on the CPU."""
    return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()


class CollectiveLink:
    """The members' process group, its warm-up and its bounded waits."""

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


class CollectiveSend(CollectiveLink):
    """Trainer side: announce a send, then send every piece, round-robin over generators."""

    def _connect_collective(self) -> None:
        self.pg = self._make_pg(self.device)
        T = self.plan.trainer_ranks
        self.warmed_up = self._warm_up(range(T, T + self.plan.generator_ranks), self.device)

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

    def _close_collective(self) -> None:
        """Tell every generator's receiving thread to stop (a send announced with no pieces)."""
        try:
            self.store.set(f"sending/{self.seq}/{self.rank}", str(CLOSE_VERSION))
        except RuntimeError:  # the store's host is gone: so are the generators
            pass


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


class CollectiveReceive(CollectiveLink):
    """Generator side: the receiving thread fills the staging slot; the role loop adopts it."""

    def _connect_collective(self, device: torch.device) -> None:
        self.pg = self._make_pg(device)
        with _on(self.stream):
            self.warmed_up = self._warm_up(range(self.plan.trainer_ranks), device)
        self._inbox = _Inbox(self._announced, self._recv_send, self.timeout_s, self.plan.num_slots)
        self._inbox.start()

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
        return agreed_version(self.store, keys, f"DDMA send #{n}")

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

    def _arrived_collective(self) -> int | None:
        """The version of send #seq if the receiving thread has landed it (raises its error)."""
        if self._inbox.error is not None:
            raise RuntimeError(f"DDMA weight sync (generator rank {self.rank}): receiving send #{self.seq} "
                               f"failed: {self._inbox.error}") from self._inbox.error
        return self._inbox.ready.get(self.seq)

    def _wanted_collective(self) -> bool:
        """One slot: every trainer announced the next send (they wait for this rank to pause)."""
        self._arrived_collective()  # raises the receiving thread's error
        return self._inbox.announced >= self.seq

    def _left_slot_collective(self, slot: int) -> None:
        """`slot` may be rewritten: once the decode steps queued until now have read it (CUDA)."""
        if self.stream is not None:
            left = torch.cuda.Event()
            left.record()
            self._inbox.left[slot] = left
        self._inbox.free.release()

    def _wait_collective(self, left_s: float) -> None:
        """Until the receiving thread's notice or a wait slice (no poll sleep)."""
        with self._inbox.arrived:
            if self.seq not in self._inbox.ready and self._inbox.error is None:
                self._inbox.arrived.wait(timeout=min(left_s, WAIT_SLICE_S))

    def _adopted_collective(self, n: int) -> None:
        self._inbox.ready.pop(n, None)
        k = self.plan.num_slots
        if k > 1 and n >= 1:  # slot (n+1) % 2 is free again (both were free before the first adoption)
            self._left_slot_collective((n + 1) % k)

    def _close_collective(self) -> None:
        if self._inbox is not None:
            self._inbox.closed = True
            self._inbox._thread.join(timeout=2 * WAIT_SLICE_S)  # ends at its next wait slice
