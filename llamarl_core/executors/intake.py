"""Which complete prompt groups step v trains (issue 26 item 2): pure bookkeeping, no I/O.

    rows from the reward role (a chunk's slice for this rank, or single groups)
      └─ split into groups, each keyed (replica, chunk, slot): slot = its place in this rank's
         slice of the chunk. A key already trained is skipped; a key already buffered is
         replaced in place by the newer (fresher) copy; else appended (arrival order). A
         skipped or replaced copy is a duplicate: dropped untrained and counted (`on_duplicate`).
    step v, per source replica i: the first share_i buffered groups whose oldest token was
      sampled under a version >= v - k, in arrival order; every buffered group older than
      that is dropped — counted, and its chunk handed back (`on_drop`) to be generated again.
    chunk n of replica i is consumed once every slot of this rank's slice of it was trained:
      `on_consumed(i, n + 1)` (data/expect: where a restarted generator starts).

Why a share per source replica, not the first groups of any replica: the generator's credit rule
(chunk n is trained at step n - dropped_i, executors/generate_loop.py) assumes each step takes
one chunk's worth of replica i. Taking more of a fast replica would leave a slow one's window
behind the trainer and let it stall (its gate shut, the trainer waiting for its groups). With
one source replica per trainer rank (G = 1, or G = T) both rules are the same.

Exactly once: a group is trained at most once (its key is remembered until its chunk is
consumed; keys below `next_chunk` are never taken again). Copies of a chunk come from its
generation and from each redo (a redo regenerates the whole chunk, so its groups that were
trained come again, and two trainer ranks, or one rank at two steps, may each ask for it): they
reach a rank in the order they were generated (one replica → one reward rank → this rank, each
hop in order), so the later arrival is the fresher copy, whatever its `attempt` (that number
only keeps copies apart at the reward rank; a restarted generator's chunks are attempt 0
again). A dropped group is not consumed, so its chunk stays at or above `next_chunk`: it is
generated again (by `on_drop`'s redo, or by a restarted or resumed generator starting at the
first chunk not consumed) and trained later.
The buffer is bounded by the credit rule: a replica runs at most k + 1 chunks ahead of the step.
A row's oldest token is its first (versions only move forward), so checking each group's
`policy_versions.min()` bounds every token.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Optional

from llamarl_core.wire.rollout import Rollout


class GroupIntake:
    def __init__(self, shares: dict[int, int], group_size: int, max_offpolicy_steps: int,
                 on_drop: Callable[[int, int, int], None] = lambda replica, chunk, groups: None,
                 on_consumed: Callable[[int, int], None] = lambda replica, next_chunk: None,
                 first_groups: Optional[dict[int, int]] = None,
                 on_duplicate: Callable[[int, int, int], None] = lambda replica, chunk, groups: None):
        """`shares`: replica → groups of each of its chunks this rank trains (its slice);
        `on_drop(replica, chunk, groups)`: that many groups of the chunk went stale here;
        `on_duplicate(replica, chunk, groups)`: that many copies of groups trained or buffered
        already arrived (dropped untrained);
        `first_groups`: replica → the chunk's group index of the slice's first group (for
        rollouts sent one group at a time, which carry their group index)."""
        self.shares, self.group_size, self.k = dict(shares), group_size, max_offpolicy_steps
        self.on_drop, self.on_consumed, self.on_duplicate = on_drop, on_consumed, on_duplicate
        self.first_groups = first_groups or {i: 0 for i in shares}
        self.next_chunk: dict[int, int] = {i: 0 for i in shares}
        self.trained: dict[int, dict[int, set[int]]] = {i: {} for i in shares}  # chunks >= next_chunk
        self.buffer: dict[int, OrderedDict] = {i: OrderedDict() for i in shares}  # (chunk, slot) → rows
        self.dropped_groups = 0
        self.duplicate_groups = 0

    # ---- arrivals -----------------------------------------------------------------------
    def add(self, rollout: Rollout) -> int:
        """Buffer `rollout`'s groups (skipping any already trained, replacing any buffered);
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
            if self._trained(i, key):  # a late copy of a group trained already
                duplicates += 1
                continue
            if key in self.buffer[i]:  # the newer copy replaces the older one, in its place
                duplicates += 1
            else:
                new += 1
            self.buffer[i][key] = rollout.rows(t * g, (t + 1) * g)
        if duplicates:
            self.duplicate_groups += duplicates
            self.on_duplicate(i, n, duplicates)
        return new

    def _trained(self, replica: int, key: tuple[int, int]) -> bool:
        chunk, slot = key
        return chunk < self.next_chunk[replica] or slot in self.trained[replica].get(chunk, ())

    # ---- a step -------------------------------------------------------------------------
    def take(self, replica: int, version: int, n: Optional[int] = None) -> Optional[list[Rollout]]:
        """The first `n` (default: the replica's share) fresh groups of `replica` for a step at
        `version`, marked trained; None while fewer are buffered. Stale ones are dropped first."""
        n = self.shares[replica] if n is None else n
        self._drop_stale(replica, version)
        if len(self.buffer[replica]) < n:
            return None
        return self._pop(replica, n)

    def take_upto(self, replica: int, version: int, n: int) -> list[Rollout]:
        """Up to `n` fresh groups of `replica` buffered now (none is fine), marked trained: how a
        trainer that starts micro-batches as groups arrive takes its share piece by piece
        (executors/train_step.py). Taken in arrival order at the step's one version, the
        pieces are the groups `take` would have taken at once."""
        self._drop_stale(replica, version)
        return self._pop(replica, n)

    def _pop(self, replica: int, n: int) -> list[Rollout]:
        """The first `n` buffered groups of `replica` (fewer if fewer), marked trained."""
        buf = self.buffer[replica]
        keys = list(buf)[:max(0, n)]
        taken = [buf.pop(key) for key in keys]
        for chunk, slot in keys:
            self.trained[replica].setdefault(chunk, set()).add(slot)
        if keys:
            self._advance(replica)
        return taken

    def _drop_stale(self, replica: int, version: int) -> None:
        """Drop (count, hand back) every buffered group older than `version` - k."""
        buf, oldest = self.buffer[replica], version - self.k
        stale = [key for key, rows in buf.items() if rows.policy_version < oldest]
        for key in stale:
            del buf[key]
        self.dropped_groups += len(stale)
        for chunk in sorted({c for c, _ in stale}):
            self.on_drop(replica, chunk, sum(c == chunk for c, _ in stale))

    def _advance(self, replica: int) -> None:
        done, share, moved = self.trained[replica], self.shares[replica], False
        while len(done.get(self.next_chunk[replica], ())) >= share:
            del done[self.next_chunk[replica]]
            self.next_chunk[replica] += 1
            moved = True
        if moved:
            self.on_consumed(replica, self.next_chunk[replica])

    # ---- checkpoints --------------------------------------------------------------------
    def position(self) -> dict:
        """This rank's data position as JSON: the first chunk not consumed per replica and the
        slots trained beyond it. What is only buffered is not in it: it is generated again."""
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
