"""The trainer's model as planned: device, master dtype, sharding, checkpointing, load path.

    weights   fp32 master copy; resources.trainer.dtype is the compute dtype (bf16/fp16 =
              mixed precision: FSDP2 policy or autocast, transport/parallel.py). With LoRA
              (model.lora) only the adapters are trained and kept in fp32; the frozen base is
              held in the compute dtype (no master copy: it is never stepped). FSDP2 (torch
              2.13) asks a uniform original dtype of a unit's *trainable* parameters only, so
              bf16 base + fp32 adapters share one unit
    lora      applied before wrapping (DDP/FSDP2 see the adapters); on the sharded load path the
              adapters are drawn after materialising, the same on every rank (sharded_load.py)
    layout    trainer_sharding(resources.trainer, ranks) -> (fsdp, dp): DDP, FSDP or HSDP
    loading   a checkpoint under FSDP2 with > 1 rank: built on the meta device, sharded, then
              each rank reads only its rows (transport/sharded_load.py); otherwise the full
              model (seeded preset init or checkpoint) is built once per rank
    reference the frozen KL reference (algorithm.kl_coef > 0, no LoRA: with LoRA the reference
              is the trained module with its adapters off, learner.py): built on the meta device, laid
              out like the trained model (FSDP2 shards on its mesh, or a replica per rank under
              DDP), stored in the compute dtype, filled from the trained model's own part on
              each rank: no rank ever holds the full reference where the trainer is sharded
"""
from __future__ import annotations

import torch

from llamarl_core.config.layout import trainer_sharding
from llamarl_core.config.schema import ModelConfig, TrainerResources
from llamarl_core.executors.context import RoleRuntime
from llamarl_core.models import build_empty, load_tokenizer
from llamarl_core.models.build import build_model
from llamarl_core.models.dtypes import TORCH_DTYPES
from llamarl_core.models.lora import apply_lora, copy_adapters, hold_base_in
from llamarl_core.models.peft_io import adapter_for
from llamarl_core.transport.parallel import copy_weights, shard_like, unwrap, wrap_data_parallel
from llamarl_core.transport.sharded_load import init_adapters, load_sharded, materialize

MASTER_DTYPE = "float32"


def loads_sharded(model: ModelConfig, t: TrainerResources, world: int) -> bool:
    """Whether each rank reads only its shard: a checkpoint, FSDP2, and more than one rank per
    shard group (fsdp2 with resources.trainer.fsdp=1 is built as DDP replicas, each whole)."""
    fsdp, _ = trainer_sharding(t, world)
    return bool(model.checkpoint) and t.strategy == "fsdp2" and fsdp > 1


def build_trainer_model(ctx: RoleRuntime, model_cfg: ModelConfig, t: TrainerResources, seed: int):
    """(model as trained — maybe wrapped, raw module, tokenizer); `t`: resources.trainer,
    `seed`: run.seed (the preset's init)."""
    group = ctx.groups.get(ctx.role)
    world = len(ctx.ranks(ctx.role)) or 1
    _, dp = trainer_sharding(t, world)
    device = torch.device(ctx.device)
    sharded = loads_sharded(model_cfg, t, world)
    if sharded:
        raw, _ = build_empty(model_cfg.checkpoint, device="meta")
        tokenizer = load_tokenizer(model_cfg.checkpoint, required=False)
    else:
        raw, tokenizer = build_model(model_cfg, dtype=MASTER_DTYPE, device=str(device), seed=seed)
    lora = model_cfg.lora
    if lora.enabled:  # base frozen, adapters trained (models/lora.py); every rank draws the same A
        apply_lora(raw, lora.rank, lora.scale, lora.target_modules, lora.dropout, seed=seed)
        hold_base_in(raw, TORCH_DTYPES[t.dtype])
    start = adapter_for(raw, lora.init_from, lora)[1] if lora.init_from else None  # whole tensors
    if start is not None and not sharded:
        copy_adapters(raw, start)
    model = wrap_data_parallel(raw, group, t.strategy, device.type, dp=dp,
                               compute_dtype=TORCH_DTYPES[t.dtype],
                               activation_checkpointing=t.activation_checkpointing)
    if sharded:
        materialize(raw, device)
        load_sharded(raw, model_cfg.checkpoint)
        if lora.enabled:
            init_adapters(raw, lora.target_modules, seed, start)
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
