"""Wire the weight sync (weight_sync.py) to a run: transport choice, group, names, dtypes.

Both ends describe the trainer's parameters (names, shapes, dtype) the same way, from the
config alone; the generator's dtype, if different, is the wire dtype (conversion on the way).
`auto` picks shared memory on a single CPU host, CUDA IPC when generator and trainer share
one GPU, and the collective everywhere else.
"""
from __future__ import annotations

import torch

from llamarl_core.models.dtypes import TORCH_DTYPES
from llamarl_core.executors.context import WorkerContext
from llamarl_core.transport.weight_sync import WeightSyncReceiver, WeightSyncSender


def transport(ctx: WorkerContext) -> str:
    t = ctx.cfg.controller.weight_transport
    if t != "auto":
        return t
    if ctx.cfg.resources.share_devices:
        return "cuda_ipc"  # one GPU: NCCL cannot join two ranks on it
    return "shm" if ctx.cfg.resources.device == "cpu" and ctx.plan.get("nodes", 1) == 1 else "collective"


def _named_shapes(params: dict[str, torch.Tensor], dtype: torch.dtype) -> dict:
    return {n: (tuple(p.shape), dtype) for n, p in params.items()}


def _kwargs(ctx: WorkerContext, params: dict[str, torch.Tensor]) -> dict:
    r = ctx.cfg.resources
    # The trainer keeps fp32 master weights (its dtype is the compute dtype): those are sent.
    trainer_dtype, gen_dtype = torch.float32, TORCH_DTYPES[r.generator.dtype]
    return dict(named_shapes=_named_shapes(params, trainer_dtype), transport=transport(ctx),
                bucket_mb=ctx.cfg.controller.weight_bucket_mb,
                group=ctx.groups["weights"], src_rank=ctx.ranks("trainer")[0], store=ctx.control.store,
                run_id=ctx.run_id, wire_dtype=gen_dtype if gen_dtype != trainer_dtype else None)


def make_sender(ctx: WorkerContext, params: dict[str, torch.Tensor]) -> WeightSyncSender:
    return WeightSyncSender(**_kwargs(ctx, params))


def make_receiver(ctx: WorkerContext, params: dict[str, torch.Tensor]) -> WeightSyncReceiver:
    return WeightSyncReceiver(**_kwargs(ctx, params))
