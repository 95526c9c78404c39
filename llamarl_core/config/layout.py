"""How a trainer's devices split into FSDP shards and data-parallel replicas, which transport
the weight sync takes for a layout, and how long a rollout row is.

Shared by the planner (memory, groups) and the scale simulator (communication volumes), so it
sits in `config`, below both.
"""
from __future__ import annotations


def trainer_sharding(t, num_devices: int) -> tuple[int, int]:
    """(fsdp, dp) of a trainer layout over num_devices; fsdp=0 shards over all DP ranks."""
    fsdp = t.fsdp or max(1, num_devices // (t.tp * t.pp * (t.dp or 1)))
    return fsdp, max(1, num_devices // (fsdp * t.tp * t.pp))


def trainer_shards(trainer, world: int) -> int:
    """Ranks one copy of the trainer's weights is split over, as `transport/parallel.wrap_data_parallel`
    builds it: the FSDP group under fsdp2 (HSDP: T/fsdp replicas of it), else every rank (DDP
    replicas each send 1/T of the rows, `transport/parallel.local_shards`)."""
    fsdp, _ = trainer_sharding(trainer, world)
    return fsdp if trainer.strategy == "fsdp2" and fsdp > 1 else world


def resolve_transport(weight_transport: str, resources, nodes: int) -> str:
    """controller.weight_transport, with `auto` resolved for the planned layout."""
    if weight_transport != "auto":
        return weight_transport
    if resources.share_devices:  # one GPU for both: NCCL refuses two ranks on a device
        return "cuda_ipc"
    return "shm" if resources.device == "cpu" and nodes == 1 else "collective"


def row_tokens(generation, env) -> int:
    """Tokens one row holds: the longest prompt and the longest completion, or with an
    environment (env.enabled) an episode's every turn and message after its opening
    (env.max_episode_tokens). Rollout rows, the engines' KV caches (generator and eval) and the
    plan's memory are all sized by it."""
    return generation.max_prompt_tokens + (env.max_episode_tokens if env.enabled else generation.max_new_tokens)
