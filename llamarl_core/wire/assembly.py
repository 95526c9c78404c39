"""A reward rank's chunks as they arrive, one prompt group at a time, with no copy.

A generator sends each prompt group the moment it ends (wire/rollout.py); the reward rank
must forward the whole chunk's rows to the trainer ranks. Instead of receiving each group
into its own tensors and concatenating them (a copy of every row), the receive writes each
group straight into its rows of one packed buffer per chunk:

    header of group g of chunk n (replica i) ──▶ `buffers(header)`: rows [g·G, g·G + rows) of
                                                 chunk (i, n)'s ints [N, L + 4] and floats [N, L]
    the received part: views of those rows   ──▶ scored in place (its rewards column)
    `add(part)`: once every group landed     ──▶ the chunk = those two buffers (views, no copy);
                                                 `rows(lo, hi)` per trainer rank, sent as they are

`buffers` runs on the receiving threads (transport/channels.py), `add` on the role's loop:
both take the lock. A message that is a whole chunk (chunk_groups = 0: the sync actor's)
gets buffers of its own and is its own chunk.

A buffer is keyed (replica, chunk): a chunk is generated once (executors/admission.py), again
only by a restarted generator, whose copy of a group lands in the same rows. Which copy the
trainer trains is the intake's business (executors/intake.py).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Optional

import torch

from llamarl_core.wire.rollout import Rollout


@dataclass
class _Chunk:
    ints: torch.Tensor    # [N, L + 4]
    floats: torch.Tensor  # [N, L]: log mu at targets [N, L - 1], rewards
    groups: set[int] = field(default_factory=set)


class ChunkAssembly:
    def __init__(self, group_size: int):
        self.group_size = group_size
        self._lock = threading.Lock()
        self._chunks: dict[tuple[int, int], _Chunk] = {}  # (replica, chunk) → its buffer

    def buffers(self, header: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Where the message with `header` is received: its rows of its chunk's buffers."""
        rows, length, completion = (int(x) for x in header[:3])
        replica, chunk, group, chunk_groups = (int(x) for x in header[4:8])
        if chunk_groups == 0:
            return Rollout.empty_buffers(header)
        first, key = group * self.group_size, (replica, chunk)
        with self._lock:
            c = self._chunks.get(key)
            if c is None:
                n = chunk_groups * self.group_size
                c = self._chunks[key] = _Chunk(*Rollout.empty_buffers(torch.tensor([n, *header[1:]])))
        if (c.ints.shape[1], c.floats.shape[1]) != Rollout.packed_widths(header) or first + rows > c.ints.shape[0]:
            raise ValueError(f"replica {replica} chunk {chunk} group {group}: {rows} rows of "
                             f"{length} tokens and {completion} log-probs do not fit its chunk's [{c.ints.shape[0]}, "
                             f"{c.ints.shape[1] - 4}] rows (group_size {self.group_size})")
        return c.ints[first:first + rows], c.floats[first:first + rows]

    def add(self, part: Rollout) -> Optional[Rollout]:
        """The whole chunk once `part` was its last group (views of its buffers), else None."""
        if part.chunk_groups == 0:
            return part
        key = (part.replica, part.chunk)
        with self._lock:
            c = self._chunks[key]
            c.groups.update(range(part.group, part.group + part.num_rows // self.group_size))
            if len(c.groups) * self.group_size < c.ints.shape[0]:
                return None
            del self._chunks[key]
        return Rollout._from_packed(c.ints, c.floats, part.tokens.shape[1], part.replica, part.chunk)
