"""How a trainer's devices split into FSDP shards and data-parallel replicas.

Shared by the planner (memory, groups) and the scale simulator (communication volumes), so it
sits in `config`, below both.
"""
from __future__ import annotations


def trainer_sharding(t, num_devices: int) -> tuple[int, int]:
    """(fsdp, dp) of a trainer layout over num_devices; fsdp=0 shards over all DP ranks."""
    fsdp = t.fsdp or max(1, num_devices // (t.tp * t.pp * (t.dp or 1)))
    return fsdp, max(1, num_devices // (fsdp * t.tp * t.pp))
