"""Which prompt groups step v trains: each source replica's chunks, in order (no I/O).

    rows from the reward role (a chunk's slice for this rank, or single groups)
      └─ split into groups, each keyed (replica, chunk, slot): slot = its place in this rank's
         slice of the chunk. A key already taken (below `next_chunk`, or taken in this chunk) is
         skipped; a key already buffered is replaced by the newer copy. Either is a duplicate:
         dropped untrained and counted (`on_duplicate`).
    step v, per source replica i: the slice of chunk next_chunk[i], whole (`take`) or piece by
      piece as its groups arrive (`take_upto`, arrival order); a later chunk's groups that
      arrive early wait in the buffer. A dynamic-sampling round takes the next chunk as well.
    chunk n of replica i is consumed once every slot of this rank's slice of it was taken:
      `on_consumed(i, n + 1)` (data/expect: where a restarted generator starts).

Why in order: chunk n is then trained at exactly step n − extra_i, the step executors/admission.py
let it start for, so nothing here compares versions; a replica runs at most k + 1 chunks ahead.

Exactly once: a group is taken at most once (keys below `next_chunk` are never taken again).
Copies come only from restarts: a restarted or resumed generator starts at the first chunk not
consumed by every trainer rank (rejoin.start_chunk), so groups this rank took or buffered
already can come again (as they do, in order, over one replica → one reward rank → this rank).
"""
from __future__ import annotations

from typing import Callable, Optional

from llamarl_core.wire.rollout import Rollout


class GroupIntake:
    def __init__(self, shares: dict[int, int], group_size: int,
                 on_consumed: Callable[[int, int], None] = lambda replica, next_chunk: None,
                 first_groups: Optional[dict[int, int]] = None,
                 on_duplicate: Callable[[int, int, int], None] = lambda replica, chunk, groups: None):
        """`shares`: replica → groups of each of its chunks this rank trains (its slice);
        `on_duplicate(replica, chunk, groups)`: that many copies of groups taken or buffered
        already arrived (dropped untrained);
        `first_groups`: replica → the chunk's group index of the slice's first group (for
        rollouts sent one group at a time, which carry their group index)."""
        self.shares, self.group_size = dict(shares), group_size
        self.on_consumed, self.on_duplicate = on_consumed, on_duplicate
        self.first_groups = first_groups or {i: 0 for i in shares}
        self.next_chunk: dict[int, int] = {i: 0 for i in shares}
        self.trained: dict[int, dict[int, set[int]]] = {i: {} for i in shares}  # chunks >= next_chunk
        self.buffer: dict[int, dict] = {i: {} for i in shares}  # (chunk, slot) → rows, arrival order
        self.duplicate_groups = 0

    # ---- arrivals -----------------------------------------------------------------------
    def add(self, rollout: Rollout) -> int:
        """Buffer `rollout`'s groups (skipping any already taken, replacing any buffered);
        returns how many were new."""
        i, n, g = rollout.replica, rollout.chunk, self.group_size
        if not rollout.chunk_groups and rollout.num_rows != self.shares[i] * g:
            raise ValueError(f"replica {i} chunk {n}: {rollout.num_rows} rows without a group index "
                             f"(chunk_groups = 0) but this rank's slice is {self.shares[i] * g}: a part of "
                             f"a chunk must carry its `group` and `chunk_groups` (wire/rollout.py)")
        base = rollout.group - self.first_groups[i] if rollout.chunk_groups else 0
        new = duplicates = 0
        for t in range(rollout.num_rows // g):
            key = (n, base + t)
            taken = self._trained(i, key)
            if taken or key in self.buffer[i]:
                duplicates += 1
            else:
                new += 1
            if not taken:  # the newer copy replaces the older one, in its place
                self.buffer[i][key] = rollout.rows(t * g, (t + 1) * g)
        if duplicates:
            self.duplicate_groups += duplicates
            self.on_duplicate(i, n, duplicates)
        return new

    def _trained(self, replica: int, key: tuple[int, int]) -> bool:
        chunk, slot = key
        return chunk < self.next_chunk[replica] or slot in self.trained[replica].get(chunk, ())

    # ---- a step -------------------------------------------------------------------------
    def take(self, replica: int) -> Optional[list[Rollout]]:
        """The rest of `replica`'s current chunk slice, marked taken; None until all of it is
        buffered."""
        keys = self._current(replica)
        left = self.shares[replica] - len(self.trained[replica].get(self.next_chunk[replica], ()))
        return self._pop(replica, keys) if len(keys) >= left else None

    def take_upto(self, replica: int, n: int) -> list[Rollout]:
        """Up to `n` groups of `replica`'s current chunk buffered now (none is fine), marked taken:
        how a trainer that starts micro-batches as groups arrive takes its share piece by piece
        (executors/train_step.py)."""
        return self._pop(replica, self._current(replica)[:max(0, n)])

    def _current(self, replica: int) -> list[tuple[int, int]]:
        """Buffered keys of the replica's current chunk, in arrival order."""
        return [key for key in self.buffer[replica] if key[0] == self.next_chunk[replica]]

    def _pop(self, replica: int, keys: list[tuple[int, int]]) -> list[Rollout]:
        taken = [self.buffer[replica].pop(key) for key in keys]
        for chunk, slot in keys:
            self.trained[replica].setdefault(chunk, set()).add(slot)
        done, share, moved = self.trained[replica], self.shares[replica], False
        while len(done.get(self.next_chunk[replica], ())) >= share:
            done.pop(self.next_chunk[replica], None)
            self.next_chunk[replica] += 1
            moved = True
        if moved:
            self.on_consumed(replica, self.next_chunk[replica])
        return taken

    # ---- checkpoints --------------------------------------------------------------------
    def position(self) -> dict:
        """This rank's data position as JSON: the first chunk not consumed per replica and the
        slots taken beyond it. What is only buffered is not in it: it is generated again."""
        return {"next_chunk": dict(self.next_chunk),
                "trained_ahead": {i: {c: sorted(s) for c, s in chunks.items() if s}
                                  for i, chunks in self.trained.items()}}

    def restore(self, position: dict) -> None:
        for i, c in position.get("next_chunk", {}).items():
            if int(i) in self.next_chunk:
                self.next_chunk[int(i)] = int(c)
        for i, chunks in position.get("trained_ahead", {}).items():
            if int(i) in self.trained:
                self.trained[int(i)] = {int(c): set(s) for c, s in chunks.items()}
        for i in self.buffer:
            self.buffer[i].clear()
