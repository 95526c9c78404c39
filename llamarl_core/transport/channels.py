"""The data plane: rollout chunks as tensors over torch.distributed point-to-point.

    generator replica i ──send──▶ reward rank (i mod R) ──send──▶ trainer rank(s) j

A message is three tensors (header, ints, floats) sent in order with one tag; reward →
trainer tags name the generator replica, so a trainer posts exactly the receive it expects.
Nothing here goes through the TCPStore.

Why threads: gloo's point-to-point `Work.is_completed()` stays False until `wait()`, and a
`wait(timeout)` that expires closes the connection. So blocking send/recv run on one
background thread per stream, and the role's loop polls plain Python state. That keeps a
generator whose last chunk is not yet taken free to join a weight broadcast (no cross-role
deadlock), and lets every loop notice a finished or aborted run.
"""
from __future__ import annotations

import queue
import threading
from typing import Callable

import torch
import torch.distributed as dist

from llamarl_core.wire.rollout import HEADER_LEN, Rollout

TAG_TO_REWARD = 1              # generator → reward (any source; the header names the replica)
TAG_TO_TRAINER_BASE = 1000     # reward → trainer, + replica index


class AsyncSender:
    """Sends rollouts in order on a background thread; `idle()` once all were taken."""

    def __init__(self, name: str = "sender"):
        self._queue: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._pending = 0
        self.error: BaseException | None = None
        threading.Thread(target=self._loop, daemon=True, name=name).start()

    def send(self, rollout: Rollout, dst: int, tag: int) -> None:
        self._raise()
        with self._lock:
            self._pending += 1
        self._queue.put((rollout.pack(), dst, tag))

    def idle(self) -> bool:
        self._raise()
        with self._lock:
            return self._pending == 0

    def _loop(self) -> None:
        while True:
            tensors, dst, tag = self._queue.get()
            try:
                for t in tensors:
                    dist.send(t, dst=dst, tag=tag)
            except BaseException as e:  # surfaced to the role's loop by idle()/send()
                self.error = e
                return
            with self._lock:
                self._pending -= 1

    def _raise(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"sending a rollout failed: {self.error}") from self.error


def recv_rollout_blocking(src: int | None, tag: int) -> Rollout:
    header = torch.zeros(HEADER_LEN, dtype=torch.int64)
    sender = dist.recv(header, src=src, tag=tag)
    ints, floats = Rollout.empty_buffers(header)
    for t in (ints, floats):
        dist.recv(t, src=sender, tag=tag)
    return Rollout.unpack(header, ints, floats)


class AsyncReceiver:
    """Receives rollouts from `src` (None = any) with `tag` on a background thread."""

    def __init__(self, src: int | None, tag: int, prefetch: int = 1):
        self._queue: queue.Queue = queue.Queue(maxsize=prefetch)
        self.src, self.tag = src, tag
        self.error: BaseException | None = None
        threading.Thread(target=self._loop, daemon=True, name=f"recv-{src}-{tag}").start()

    def _loop(self) -> None:
        try:
            while True:
                self._queue.put(recv_rollout_blocking(self.src, self.tag))
        except BaseException as e:
            self.error = e

    def get(self, should_stop: Callable[[], bool], poll_s: float = 0.01) -> Rollout | None:
        """The next rollout, or None once `should_stop()` is true while waiting."""
        while True:
            try:
                return self._queue.get(timeout=poll_s)
            except queue.Empty:
                if self.error is not None:
                    raise RuntimeError(f"receiving a rollout from rank {self.src} failed: "
                                       f"{self.error}") from self.error
                if should_stop():
                    return None
