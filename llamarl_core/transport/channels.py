"""The data plane: rollout chunks as tensors over 2-rank gloo links (transport/links.py).

    generator replica i ──send──▶ reward rank (i mod R) ──send──▶ trainer rank(s) j

A message is three tensors (header, ints, floats) sent in order with one tag; reward →
trainer tags name the generator replica, so a trainer posts exactly the receive it expects.
Nothing here goes through the TCPStore (beyond building a link).

Why threads: gloo's point-to-point `Work.is_completed()` stays False until `wait()`, and a
`wait(timeout)` that expires closes the connection. So blocking send/recv run on one
background thread per stream, and the role's loop waits on plain Python state. That keeps a
generator whose last chunk is not yet taken free to join a weight sync (no cross-role
deadlock), and lets every loop notice a finished or aborted run, or a restarted peer.

No poll on the data path: a receiver thread posts its next receive as soon as it has queued
the last one (`prefetch` deep: a step's groups, so a sender never waits on a busy role), and
it wakes the role's loop through an `Arrivals` event; `get_any` sleeps on that event (a
timeout only to look at the run's state), so a group is taken the moment it lands.

A link that fails (its peer died) raises `LinkBroken` in the role's loop, which then waits
for the controller's verdict: a restart (new epoch, new links) or the end of the run.
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Callable

import torch

from llamarl_core.transport.links import Link
from llamarl_core.wire.rollout import HEADER_LEN, Rollout

TAG_TO_REWARD = 1              # generator → reward (the header names the replica)
TAG_TO_TRAINER_BASE = 1000     # reward → trainer, + replica index
Buffers = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]  # header → (ints, floats) to receive into


class LinkBroken(RuntimeError):
    """A send or receive on a rollout link failed: the peer is gone (or going)."""


class AsyncSender:
    """Sends rollouts in order on a background thread; `idle()` once all were taken."""

    def __init__(self, name: str = "sender"):
        self._queue: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._pending = 0
        self.error: BaseException | None = None
        threading.Thread(target=self._loop, daemon=True, name=name).start()

    def send(self, rollout: Rollout, link: Link, tag: int) -> None:
        self._raise()
        with self._lock:
            self._pending += 1
        self._queue.put((rollout, link, tag))

    def idle(self) -> bool:
        self._raise()
        with self._lock:
            return self._pending == 0

    def healthy(self) -> bool:
        """True while no send has failed; LinkBroken once one has (whatever is still queued)."""
        self._raise()
        return True

    def _loop(self) -> None:
        while True:
            rollout, link, tag = self._queue.get()
            try:  # packed here: a generator's tokens may still be on its GPU (this thread waits for them)
                for t in rollout.to("cpu").pack():
                    link.send(t, tag)
            except BaseException as e:  # surfaced to the role's loop by idle()/send()
                self.error = e
                return
            with self._lock:
                self._pending -= 1

    def _raise(self) -> None:
        if self.error is not None:
            raise LinkBroken(f"sending a rollout failed: {self.error}") from self.error


def recv_rollout_blocking(link: Link, tag: int, buffers: Buffers = Rollout.empty_buffers) -> Rollout:
    """One rollout, received into `buffers(header)` (wire/assembly.py: a chunk's rows)."""
    header = torch.zeros(HEADER_LEN, dtype=torch.int64)
    link.recv(header, tag)
    ints, floats = buffers(header)
    for t in (ints, floats):
        link.recv(t, tag)
    return Rollout.unpack(header, ints, floats)


class Arrivals:
    """One event shared by the receivers a loop waits on: set whenever any of them gets a
    rollout (or fails), so the loop sleeps until something happened instead of polling."""

    def __init__(self):
        self._event = threading.Event()

    def notify(self) -> None:
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

    def wait(self, timeout_s: float) -> bool:
        return self._event.wait(timeout_s)


class AsyncReceiver:
    """Receives rollouts on `link` with `tag` on a background thread, up to `prefetch` ahead,
    each into `buffers(header)` (default: tensors of its own)."""

    def __init__(self, link: Link, tag: int, prefetch: int = 1, arrivals: Arrivals | None = None,
                 buffers: Buffers = Rollout.empty_buffers):
        self._queue: queue.Queue = queue.Queue(maxsize=prefetch)
        self.link, self.tag, self.buffers = link, tag, buffers
        self.arrivals = arrivals or Arrivals()
        self.error: BaseException | None = None
        threading.Thread(target=self._loop, daemon=True, name=f"recv-{link.name}-{tag}").start()

    def _loop(self) -> None:
        try:
            while True:
                self._queue.put(recv_rollout_blocking(self.link, self.tag, self.buffers))
                self.arrivals.notify()
        except BaseException as e:
            self.error = e
            self.arrivals.notify()

    def take(self) -> Rollout | None:
        """A rollout if one has arrived (never blocks); LinkBroken once the link failed."""
        try:
            return self._queue.get_nowait()
        except queue.Empty:
            if self.error is not None:
                raise LinkBroken(f"receiving a rollout on {self.link.name} failed: {self.error}") from self.error
            return None

    def get(self, should_stop: Callable[[], bool], poll_s: float = 0.01) -> Rollout | None:
        """The next rollout, or None once `should_stop()` is true while waiting."""
        while True:
            try:
                return self._queue.get(timeout=poll_s)
            except queue.Empty:
                if self.error is not None:
                    raise LinkBroken(f"receiving a rollout on {self.link.name} failed: "
                                     f"{self.error}") from self.error
                if should_stop():
                    return None


def get_any(receivers: list[AsyncReceiver], should_stop: Callable[[], bool],
            check_s: float = 0.05) -> Rollout | None:
    """The next rollout from any of `receivers` (None once `should_stop()` is true while
    waiting). Wakes on an arrival (the receivers' shared `Arrivals`); `should_stop` is looked
    at every `check_s` seconds while nothing arrives."""
    events = {id(r.arrivals): r.arrivals for r in receivers}
    while True:
        for e in events.values():
            e.clear()  # before looking: an arrival after the look sets it again
        for r in receivers:
            got = r.take()
            if got is not None:
                return got
        if should_stop():
            return None
        if len(events) == 1:
            next(iter(events.values())).wait(check_s)
        else:  # receivers built apart: still no busy loop, but a wake-up may wait check_s/10
            time.sleep(check_s / 10)
