"""Which rows of which generator replica's chunk go to which trainer rank. Pure arithmetic.

Every step covers `P` prompts (× group_size rows). Generator replica i produces prompts
[i·P/G, (i+1)·P/G); trainer data-parallel rank j trains on prompts [j·P/T, (j+1)·P/T).
Reward ranks forward each chunk's overlap with each trainer rank, so any G and T that divide
P work, and every trainer rank receives whole prompt groups.
"""
from __future__ import annotations


def prompt_range(index: int, parts: int, num_prompts: int) -> tuple[int, int]:
    size = num_prompts // parts
    return index * size, (index + 1) * size


def chunk_slices_for_trainers(replica: int, num_replicas: int, num_trainers: int,
                              num_prompts: int, group_size: int) -> list[tuple[int, int, int]]:
    """[(trainer_rank, first_row, stop_row)] of replica's chunk, rows relative to the chunk."""
    g0, g1 = prompt_range(replica, num_replicas, num_prompts)
    out = []
    for j in range(num_trainers):
        t0, t1 = prompt_range(j, num_trainers, num_prompts)
        lo, hi = max(g0, t0), min(g1, t1)
        if lo < hi:
            out.append((j, (lo - g0) * group_size, (hi - g0) * group_size))
    return out


def replicas_for_trainer(trainer: int, num_replicas: int, num_trainers: int,
                         num_prompts: int) -> list[int]:
    t0, t1 = prompt_range(trainer, num_trainers, num_prompts)
    return [i for i in range(num_replicas)
            if max(t0, prompt_range(i, num_replicas, num_prompts)[0])
            < min(t1, prompt_range(i, num_replicas, num_prompts)[1])]
