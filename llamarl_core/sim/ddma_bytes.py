"""Bytes each link of a DDMA weight sync carries, counted the way the transport plans them.

The transport's plan (transport/ddma_plan.py `build_plan`, wired in executors/weights.py) sends
trainer rank t's rows of each parameter, `fsdp_rows(dim0, s, t % s)` over the s ranks one copy
is sharded over (s = T unless HSDP keeps T/s replicas; replica `serving_replica(g, tp, T/s)`
serves generator rank g), to every generator rank g whose TP slice (`tp_slice`, generator rank g = TP rank
g % tp) overlaps them, in the wire dtype. Both rules live in models/tp_slices.py, so this module and the plan
count the same rows; tests/unit/test_sim_ddma_bytes.py checks it against `build_plan` itself.

The simulator needs only the busiest sender and the busiest receiver (every GPU has its own
NIC, so a sync takes as long as the rank with the most bytes). Replicas hold identical slices,
so a trainer rank sends `replicas` times what it sends to one replica; identical layers are
counted once, times the number of layers, which keeps 405B (T = 512) to a few thousand steps.
"""
from __future__ import annotations

from collections import Counter

from llamarl_core.models.args import ModelArgs
from llamarl_core.models.tp_slices import fsdp_rows, is_block_linear, serving_replica, tp_slice

SCALE_BYTES = 4  # a float32 scale per row of an fp8 matrix (transport/ddma_plan.py)


def param_shapes(model: ModelArgs) -> dict[str, tuple[int, ...]]:
    """Full parameter shapes of `Llama(model)` by name (names as in `named_parameters`):
    every family's biases and q/k norms included (`ModelArgs.param_shapes`)."""
    return model.param_shapes()


def _generic(name: str) -> str:
    """`layers.7.attention.wq.weight` -> `layers.0.attention.wq.weight` (layers are identical)."""
    if name.startswith("layers."):
        return "layers.0." + name.split(".", 2)[2]
    return name


def link_bytes(model: ModelArgs, *, trainer_ranks: int, generator_ranks: int, tp: int,
               bytes_per_elem: float, fp8_blocks: bool = False, trainer_shards: int = 0) -> dict:
    """Per-sync bytes: `send_max` (busiest trainer rank), `recv_max` (busiest generator rank),
    `total` (all links), and the send/recv lists per rank of one replica.

    `fp8_blocks`: the block linears (`is_block_linear`) travel as fp8, one byte per weight plus
    a float32 scale per row of the generator's local tensor (the plan's fp8 wire); everything
    else at `bytes_per_elem`."""
    if generator_ranks % tp:
        raise ValueError(f"generator ranks {generator_ranks} are not a multiple of tp={tp}")
    replicas = generator_ranks // tp
    shards = trainer_shards or trainer_ranks
    trainer_replicas = trainer_ranks // shards
    counts = Counter(_generic(n) for n in param_shapes(model))
    shapes = param_shapes(model)
    send = [0.0] * trainer_ranks
    recv = [0.0] * tp
    for name, times in counts.items():
        shape = shapes[name]
        cols = shape[1] if len(shape) == 2 else 1
        fp8 = fp8_blocks and is_block_linear(name)
        for r in range(tp):
            s = tp_slice(name, shape, model, r, tp)
            r0, r1 = (s.start, s.stop) if s.dim == 0 else (0, shape[0])
            width = s.size if s.dim == 1 else cols
            row_bytes = width * 1 + SCALE_BYTES if fp8 else width * bytes_per_elem
            recv[r] += times * (r1 - r0) * row_bytes
            served = Counter(serving_replica(i * tp + r, tp, trainer_replicas)  # trainer replica -> how many
                             for i in range(replicas))                        # generators of TP rank r
            for j in range(shards):
                a0, a1 = fsdp_rows(shape[0], shards, j)
                block = times * max(0, min(a1, r1) - max(a0, r0)) * row_bytes
                for rep, n in served.items():
                    send[rep * shards + j] += block * n
    return {"send_max": max(send), "recv_max": max(recv), "total": sum(send),
            "send_per_trainer_rank": send, "recv_per_tp_rank": recv, "replicas": replicas}
