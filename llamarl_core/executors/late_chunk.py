"""A test hook that makes a chunk reach the trainer too stale: `LLAMARL_TEST_LATE_CHUNK=N`.

Unset (a real run) it does nothing. Set, each generator replica keeps back the groups of the
first copy (attempt 0) of its chunk N as they end, instead of sending them, and sends them once
it holds version N + k + 1 (k = algorithm.max_offpolicy_steps). That makes them provably too
stale for the trainer (executors/intake.py):

- chunk N's rows started under a version ≤ N: before chunk N opens, the trainer has at most
  chunks 0..N-1 of each replica to train on, so it has published at most version N (in the
  run's first generator process; a restarted one may regenerate chunk N under a later version,
  and sends it once it holds N + k + 1, at once if it already does);
- the trainer's version is at least the version the generator holds, so when the groups
  arrive the trainer is at a version ≥ N + k + 1 and their oldest token is more than k behind.

So every group of that copy is dropped, counted (`trainer/stale_dropped_groups`) and its chunk
generated again (a redo copy, attempt > 0, not held), exactly as a long-tail group that came
too late would be. Nothing waits for the held groups meanwhile: the credit rule lets the
generator run on with chunks N+1, N+2, ..., which the trainer trains in their place.
tests/dist/test_streaming_exactly_once.py sets it for its first run.
"""
from __future__ import annotations

import os
from typing import Optional

from llamarl_core.wire.rollout import Rollout

ENV = "LLAMARL_TEST_LATE_CHUNK"


class LateChunk:
    def __init__(self, max_offpolicy_steps: int, chunk: Optional[int] = None):
        """`chunk`: the chunk to hold back (default: from $LLAMARL_TEST_LATE_CHUNK; none if unset)."""
        raw = os.environ.get(ENV, "").strip() if chunk is None else str(chunk)
        try:
            self.chunk = int(raw) if raw else None
        except ValueError:
            raise ValueError(f"{ENV}={raw!r}: expected a chunk number (a test hook; unset it)") from None
        self.k = max_offpolicy_steps
        self.held: list[Rollout] = []

    def hold(self, part: Rollout) -> bool:
        """Whether `part` (a prompt group about to be sent) is kept back instead."""
        if self.chunk is None or part.chunk != self.chunk or part.attempt != 0:
            return False
        self.held.append(part)
        return True

    def due(self, held_version: int) -> list[Rollout]:
        """The groups kept back, once the replica holds `held_version` ≥ N + k + 1 (then none)."""
        if not self.held or held_version < self.chunk + self.k + 1:
            return []
        due, self.held = self.held, []
        return due

    def forget(self) -> None:
        """A new reward link: what was kept back is generated again from the restart point."""
        self.held = []
