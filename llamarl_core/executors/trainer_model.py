"""The trainer's model as planned: device, master dtype, sharding, checkpointing, load path.

    weights   fp32 master copy always; resources.trainer.dtype is the compute dtype
              (bf16/fp16 = mixed precision: FSDP2 policy or autocast, transport/parallel.py)
    layout    trainer_sharding(resources.trainer, ranks) -> (fsdp, dp): DDP, FSDP or HSDP
    loading   a checkpoint under FSDP2 with > 1 rank: built on the meta device, sharded, then
              each rank reads only its rows (transport/sharded_load.py); otherwise the full
              model (seeded preset init or checkpoint) is built once per rank
    reference the frozen KL reference (algorithm.kl_coef > 0): built on the meta device, laid
              out like the trained model (FSDP2 shards on its mesh, or a replica per rank under
              DDP), stored in the compute dtype, filled from the trained model's own part on
              each rank: no rank ever holds the full reference where the trainer is sharded
"""
from __future__ import annotations

import torch

from llamarl_core.config.layout import trainer_sharding
from llamarl_core.executors.context import WorkerContext
from llamarl_core.executors.setup import build_model
from llamarl_core.models.dtypes import TORCH_DTYPES
from llamarl_core.models import build_empty, load_tokenizer
from llamarl_core.transport.parallel import copy_weights, shard_like, unwrap, wrap_data_parallel
from llamarl_core.transport.sharded_load import load_sharded, materialize

MASTER_DTYPE = "float32"


def loads_sharded(ctx: WorkerContext, world: int) -> bool:
    t = ctx.cfg.resources.trainer
    return bool(ctx.cfg.model.checkpoint) and t.strategy == "fsdp2" and world > 1


def build_trainer_model(ctx: WorkerContext, role: str):
    """(model as trained — maybe wrapped, raw module, tokenizer)."""
    cfg, t = ctx.cfg, ctx.cfg.resources.trainer
    group = ctx.groups.get(role)
    world = len(ctx.ranks(role)) or 1
    _, dp = trainer_sharding(t, world)
    device = torch.device(ctx.device)
    sharded = loads_sharded(ctx, world)
    if sharded:
        raw, _ = build_empty(cfg.model.checkpoint, device="meta")
        tokenizer = load_tokenizer(cfg.model.checkpoint, required=False)
    else:
        raw, tokenizer = build_model(cfg.model, dtype=MASTER_DTYPE, device=str(device), seed=cfg.run.seed)
    model = wrap_data_parallel(raw, group, t.strategy, device.type, dp=dp,
                               compute_dtype=TORCH_DTYPES[t.dtype],
                               activation_checkpointing=t.activation_checkpointing)
    if sharded:
        materialize(raw, device)
        load_sharded(raw, cfg.model.checkpoint)
    return model, raw, tokenizer


def build_reference_model(trained: torch.nn.Module, device: str | torch.device,
                          dtype: torch.dtype) -> torch.nn.Module:
    """The KL reference: a frozen copy of `trained` as it is now, laid out exactly like it, in
    `dtype` (the trainer's compute dtype: the reference is only ever run forward)."""
    raw = unwrap(trained)
    with torch.device("meta"):
        ref = type(raw)(raw.args).to(dtype)
    ref.requires_grad_(False)
    shard_like(ref, trained)
    materialize(ref, torch.device(device))
    copy_weights(ref, trained)
    return ref.eval()
