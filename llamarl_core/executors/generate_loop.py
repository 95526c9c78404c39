"""What a generator replica decides, apart from how it is wired (links, restarts, TP steps).

    adopt        a version that has fully arrived → `receive()` (a slot swap), held = it
    may generate chunk n admitted: `Admission.may_start(n, held)` (executors/admission.py,
                 the one staleness rule)
    generate     (executors/stream.py) with the held version; every SWAP_POLL_STEPS decode
                 steps (every step while the stream's freed slots wait on the gate), a version
                 that has fully arrived is adopted in place (rows record the versions they ran
                 under): `swap_if_published`

It talks only to a `WeightReceiver` and a `ControlStore` (executors/ports.py), so a test drives
it with fakes in one process (tests/unit/test_pipeline_fakes.py); `GeneratorExecutor`
(executors/generator.py) wires it to DDMA, the store and the reward links.
"""
from __future__ import annotations

import contextlib
import time
from typing import Callable

from llamarl_core.executors.admission import Admission
from llamarl_core.executors.ports import ControlStore, WeightReceiver

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
        self.replica, self.global_rank = replica, global_rank
        self.admission = Admission(control, replica, max_offpolicy_steps)
        self.should_stop, self.span, self.agree = should_stop, span, agree
        self.is_leader, self.on_adopt = is_leader, on_adopt
        self.held = -1
        self.last_sync: dict = {}
        self.decode_turns = 0  # swap_if_published calls: the same count on every TP rank of a replica

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

    def may_generate(self, chunk: int) -> bool:
        """Chunk n is admitted under the held version."""
        return self.admission.may_start(chunk, self.held)

    def wait_until_ready(self, chunk: int, healthy: Callable[[], bool] = lambda: True) -> None:
        """Until `may_generate`, or new weights arrive, or the run ends; `healthy()` raises
        once a send failed (a reward restart must end the wait)."""
        while not self.should_stop() and not self.receiver.ready() and healthy():
            if self.may_generate(chunk):
                return
            time.sleep(POLL_S)
