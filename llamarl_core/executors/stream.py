"""Streaming rollouts: one engine run that keeps a generator replica's slots full across steps.

    chunk n's prompts ──▶ slots ──▶ a row ends ──▶ its slot takes the next prompt at the next
                                                    decode step: chunk n's, else chunk n+1's
                                                    (if `may_start(n+1)`), ...
    a prompt group whose last row ended ──▶ on_group (to the reward role, as in chunk mode)

The chunk stays the unit of accounting (replica i's share of step n's prompts, consumed in
order by the trainer, admitted before its first row starts: `may_start(n)`, executors/admission.py;
the bound is on a row's first, oldest token). Only the tail of chunk n no longer leaves slots
idle: chunk n+1 fills them, under whatever version is held when each row starts (weights still
swap in place between decode steps; each token records its version: `Finished.token_versions`).

Restarts and resume work as in chunk mode: the generator (re)starts at the first chunk not
consumed (rejoin.start_chunk) and chunks consumed before are skipped by the trainer.
"""
from __future__ import annotations

import dataclasses
from collections import deque
from typing import Callable, Optional

from llamarl_core.executors.chunks import ChunkGenerator, _Groups
from llamarl_core.executors.routing import prompt_range
from llamarl_core.executors.setup import chunk_prompt_indices
from llamarl_core.generation import Finished
from llamarl_core.wire.rollout import Rollout

# A closed gate (k reached) is asked again only every this many turns (each ask is store round
# trips), or at once when the held version changed: that is what opens it.
GATE_RETRY_TURNS = 8


class StreamCut(Exception):
    """Raised by a `may_start` hook to end the stream now (a restarted peer, the run's end):
    rows still running are dropped; their chunks are generated again from the restart point."""


class ChunkStream:
    def __init__(self, chunks: ChunkGenerator):
        self.chunks = chunks
        self.open: deque = deque()   # [chunk, _Groups, example rows not yet started] in chunk order
        self.rows: dict[int, tuple[_Groups, int]] = {}  # engine prompt index → (its chunk, row)
        self.started = 0             # engine prompts handed over so far
        self.next_chunk = 0
        self.completed: Optional[Rollout] = None  # the last chunk whose rows all ended
        # the gate's last refusal, while no chunk opened since: (turns before it is asked again,
        # the version held when it refused), else None
        self._closed: Optional[tuple[int, int]] = None

    @property
    def gated(self) -> bool:
        """The gate refused the next chunk and nothing opened since: freed slots wait for what
        opens it (a newer version held), so the generator looks for weights at every decode step
        meanwhile (GenerateLoop.swap_if_published(eager=...)); the same on every TP rank."""
        return self._closed is not None

    def run(self, start: int, may_start: Callable[[int], bool], held: Callable[[], int],
            on_group: Optional[Callable[[Rollout], None]] = None,
            between_steps: Optional[Callable[[], Optional[int]]] = None,
            on_chunk: Optional[Callable[[int], None]] = None) -> int:
        """Stream chunks start, start+1, ... until none may start and every row ended.
        Returns the first chunk not started (the next run starts there)."""
        c = self.chunks
        a = c.cfg  # ChunkConfig: prompts_per_step, group_size, seed
        self.next_chunk, self.open, self.rows, self.started = start, deque(), {}, 0
        self._closed = None

        def refill(free: int) -> list[list[int]]:
            out: list[list[int]] = []
            while len(out) < free:
                if not self.open or not self.open[-1][2]:
                    if self._closed is not None:
                        turns, version = self._closed
                        if turns > 0 and held() == version:
                            self._closed = (turns - 1, version)
                            break
                    if not may_start(self.next_chunk):
                        self._closed = (GATE_RETRY_TURNS, held())
                        break
                    self._closed = None
                    self._open_chunk(self.next_chunk, held(), on_group)
                    self.next_chunk += 1
                _, groups, waiting = self.open[-1]
                # whole groups: the engine then knows a group's later members when it prefills
                # the first, and they start from its prompt KV as slots free (prefill_once.py)
                while waiting and (len(out) < free or waiting[0] % a.group_size):
                    row = waiting.popleft()
                    self.rows[self.started] = (groups, row)
                    self.started += 1
                    out.append(groups.prompt_ids[row])
            return out

        def on_finish(done: Finished) -> None:
            groups, row = self.rows.pop(done.index)
            groups.add(dataclasses.replace(done, index=row))
            if not any(groups.left):
                self.completed = groups.whole()
                if on_chunk is not None:
                    on_chunk(groups.chunk)

        seed = (c.cfg.seed * 1_000_003 + start * 1009 + c.replica) % (2**62)
        # each row an episode (envs/runner.py; one turn without an environment)
        runner = c.episode_runner(lambda i: self.rows[i][0].example_ids[self.rows[i][1]])
        refill, on_finish = runner.hooks(refill, on_finish)
        try:
            c.engine.stream([], c.params, seed=seed, on_finish=on_finish, between_steps=between_steps,
                            policy_version=held(), refill=refill)
        finally:
            runner.close()
        return self.next_chunk

    def _open_chunk(self, chunk: int, version: int, on_group) -> None:
        c, a = self.chunks, self.chunks.cfg
        indices = chunk_prompt_indices(len(c.prompts), chunk, a.prompts_per_step, c.cfg.seed)
        lo, hi = prompt_range(c.replica, c.num_replicas, a.prompts_per_step)
        example_ids = [i for i in indices[lo:hi] for _ in range(a.group_size)]
        prompt_ids = [c.prompts.prompt_ids[i] for i in example_ids]
        groups = _Groups(c, chunk, example_ids, prompt_ids, version, on_group)
        while self.open and not self.open[0][2] and not any(self.open[0][1].left):
            self.open.popleft()  # chunks whose rows have all ended
        self.open.append([chunk, groups, deque(range(len(example_ids)))])
