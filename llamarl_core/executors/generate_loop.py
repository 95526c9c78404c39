"""What a generator replica decides, apart from how it is wired (links, restarts, TP steps).

    adopt        a version that has fully arrived → `receive()` (a slot swap), held = it
    may generate weights held, the previous chunk taken by the reward role, and chunk n
                 within the staleness window: n - dropped ≤ held + k
    generate     chunk n with the held version; every SWAP_POLL_STEPS decode steps (every step
                 while a stream's freed slots wait on the gate), a version that has fully
                 arrived is adopted in place (rows record the versions they ran under)

It talks only to a `WeightReceiver` and a `ControlStore` (executors/ports.py), so a test drives
it with fakes in one process (tests/unit/test_pipeline_fakes.py); `GeneratorExecutor`
(executors/generator.py) wires it to DDMA, the store and the reward links.
"""
from __future__ import annotations

import contextlib
import time
from typing import Callable, Optional

from llamarl_core.executors.ports import ControlStore, WeightReceiver
from llamarl_core.wire.rollout import Rollout

POLL_S = 0.02  # store polls per generator rank: 50/s, light even for hundreds of ranks
# Decode steps between two looks for new weights inside a chunk: each look is store round trips
# (and a broadcast under TP), a decode step on a GPU a few milliseconds.
SWAP_POLL_STEPS = 8


def _no_span(state: str, **info):
    return contextlib.nullcontext()


class GenerateLoop:
    def __init__(self, chunks, receiver: WeightReceiver, control: ControlStore, *, replica: int,
                 global_rank: int, max_offpolicy_steps: int, should_stop: Callable[[], bool],
                 span: Callable = _no_span, agree: Callable[[bool], bool] = lambda flag: flag,
                 is_leader: bool = True, on_adopt: Callable[[int], None] = lambda version: None):
        self.chunks, self.receiver, self.control = chunks, receiver, control
        self.replica, self.global_rank, self.k = replica, global_rank, max_offpolicy_steps
        self.should_stop, self.span, self.agree = should_stop, span, agree
        self.is_leader, self.on_adopt = is_leader, on_adopt
        self.held = -1
        self.last_sync: dict = {}
        self.decode_turns = 0  # swap_if_published calls: the same count on every TP rank of a replica
        self.redo_seen = 0     # chunks asked again (ControlStore.redo_requests) served or skipped

    def receive(self) -> None:
        """Adopt the next version (a slot swap; blocks only until this rank's slice has arrived,
        which for a TP follower is the send its leader saw complete)."""
        with self.span("sync"):
            stats = self.receiver.receive()
        self.chunks.engine.refresh_weights()
        self.held = stats.version
        self.control.set_held(self.global_rank, self.held)
        self.last_sync = {"seconds": stats.seconds, "gbps": stats.gbps, "version": stats.version}
        self.on_adopt(self.held)

    def swap_if_published(self, eager: bool = False) -> int:
        """Between decode steps: take newer weights in place (the trainer need not wait for
        this chunk to end); the engine tags each running sample with the version returned.
        With TP, TP rank 0 decides for its replica (every rank must swap at the same step).
        Looked at every SWAP_POLL_STEPS steps, or at every step while `eager`: a streaming
        replica's freed slots wait on the staleness gate, which only a newer version opens
        (ChunkStream.gated, the same on every TP rank), so a version that arrived is adopted at
        the next step, not up to SWAP_POLL_STEPS later (the wait, measured from a default run's
        timelines both ways: `weight_adoption` in benchmarks/results/default_run_cpu.json)."""
        self.decode_turns += 1
        if self.decode_turns % SWAP_POLL_STEPS and not eager:
            return self.held
        swap = (self.is_leader and not self.should_stop()
                and self.receiver.ready())  # never blocks: a version that has fully arrived
        if self.agree(swap):
            self.receive()
        return self.held

    def may_generate(self, taken: bool, chunk: int) -> bool:
        """Weights held, the last chunk was `taken`, and chunk n is trained at n - dropped ≤ held + k."""
        return (self.held >= 0 and taken
                and chunk - self.control.dropped(self.replica) <= self.held + self.k)

    def wait_until_ready(self, taken: Callable[[], bool], chunk: int,
                         interrupt: Callable[[], bool] = lambda: False) -> None:
        """Until `may_generate`, or new weights arrive, or `interrupt()` (a chunk asked again),
        or the run ends."""
        while not self.should_stop() and not self.receiver.ready() and not interrupt():
            if self.may_generate(taken(), chunk):
                return
            time.sleep(POLL_S)

    # ---- chunks asked again: a trainer rank dropped groups of them as too stale (feeds.py) ----
    def skip_redos(self) -> None:
        """At a (re)start: the chunks asked again so far are at or above where the replica starts
        (the first chunk the trainer has not consumed), so they are generated anyway."""
        self.redo_seen = self.control.redo_requests(self.replica)

    def next_redo(self) -> Optional[int]:
        """The next chunk asked again, if any (it goes before the next new chunk)."""
        if self.control.redo_requests(self.replica) <= self.redo_seen:
            return None
        return self.control.redo_chunk(self.replica, self.redo_seen)

    def generate_redo(self, chunk: int, on_group: Optional[Callable[[Rollout], None]] = None) -> Rollout:
        """Chunk `chunk` (what `next_redo()` just returned) again, with the version held now (no
        staleness gate: it is fresh). Its rows carry attempt = the ask's number + 1, never that
        of another copy this process sent, so the reward rank assembles it apart from any copy
        of the same chunk still in flight (wire/assembly.py)."""
        rollout = self.generate(chunk, on_group=on_group, attempt=self.redo_seen + 1)
        self.redo_seen += 1
        # asks for the same chunk made meanwhile (other trainer ranks' stale groups of it) are
        # answered by this copy, a whole chunk: one generation, not one per ask
        while self.next_redo() == chunk:
            self.redo_seen += 1
        return rollout

    def generate(self, chunk: int, on_group: Optional[Callable[[Rollout], None]] = None,
                 attempt: int = 0) -> Rollout:
        with self.span("generate", chunk=chunk, version=self.held):
            return self.chunks.generate(chunk, self.held, on_group=on_group,
                                        between_steps=self.swap_if_published, attempt=attempt)
