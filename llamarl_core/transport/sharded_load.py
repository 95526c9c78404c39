"""Load a Hugging Face checkpoint straight into each rank's FSDP2 shard.

The model is created on the meta device, sharded (`parallel.wrap_data_parallel`), then
materialised: every rank allocates only its own shard of each parameter. The checkpoint is
streamed one tensor at a time (safetensors maps the file), and each rank copies the rows its
DTensor owns, so no rank ever holds more than one full tensor, never the full model.

LoRA adapters are not in the checkpoint: `init_adapters` draws each A whole from run.seed's
generator on every rank and keeps the rank's rows, so the adapters start the same however
many ranks shard them (and equal those `models.lora.apply_lora` draws on an unsharded model).
"""
from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

from llamarl_core.models import checkpoint_tensors
from llamarl_core.models.lora import init_a, is_adapter, modules_in_init_order


def local_slice(param: torch.Tensor, full: torch.Tensor) -> torch.Tensor:
    """The part of `full` this rank holds of `param` (a DTensor shard, or all of it)."""
    if not isinstance(param, DTensor):
        return full
    shape, offset = compute_local_shape_and_global_offset(param.shape, param.device_mesh, param.placements)
    return full[tuple(slice(o, o + s) for o, s in zip(offset, shape))]


def materialize(model: torch.nn.Module, device: str | torch.device) -> torch.nn.Module:
    """Allocate a meta-device (sharded) model's local storage on `device`, uninitialised."""
    model.to_empty(device=device)
    if model.args.tie_embeddings:  # to_empty breaks the tie; restore it
        model.output.weight = model.tok_embeddings.weight
    return model


@torch.no_grad()
def load_sharded(model: torch.nn.Module, checkpoint_dir: str) -> int:
    """Fill every rank's shards from `checkpoint_dir`; returns the bytes this rank holds.
    LoRA adapters (not in a base checkpoint) are left for `init_adapters`."""
    params = {n: p for n, p in model.named_parameters() if not is_adapter(n)}
    held = 0
    for name, tensor in checkpoint_tensors(checkpoint_dir, model.args, {n: p.shape for n, p in params.items()}):
        param = params[name]
        local = param.to_local() if isinstance(param, DTensor) else param
        piece = local_slice(param, tensor)
        local.copy_(piece.to(local.dtype))
        held += local.numel() * local.element_size()
    return held


@torch.no_grad()
def init_adapters(model: torch.nn.Module, targets, seed: int,
                  start: dict[str, torch.Tensor] | None = None) -> None:
    """PEFT's init of every LoRA adapter of a materialised (maybe sharded) model: A drawn whole,
    in `apply_lora`'s order from a generator seeded with `seed` (run.seed), each rank keeping its
    part; B = 0. `start`: whole adapter tensors by name (model.lora.init_from) instead."""
    generator = torch.Generator().manual_seed(seed)
    names = {id(p): n for n, p in model.named_parameters()}
    for m in modules_in_init_order(model, targets):
        a, b = m.lora_A.weight, m.lora_B.weight
        full_a = init_a(a.shape, generator)
        full_b = torch.zeros(b.shape)
        if start is not None:
            full_a, full_b = start[names[id(a)]], start[names[id(b)]]
        (a.to_local() if isinstance(a, DTensor) else a).copy_(local_slice(a, full_a))
        (b.to_local() if isinstance(b, DTensor) else b).copy_(local_slice(b, full_b))
