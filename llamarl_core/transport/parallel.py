"""Data parallelism for the trainer, applied from outside the model (torchtitan style).

`ddp` wraps the model in DistributedDataParallel over the trainer's group; `fsdp2` shards
each transformer block and the root with `fully_shard` on a 1-D mesh cut from that group
(works with gloo on CPU in torch 2.13). `full_state` gives rank 0 the unsharded weights for
eval and checkpoints; the weight sync never gathers: `local_shards` hands each rank's own rows
to the DDMA sender.
"""
from __future__ import annotations

import torch
import torch.distributed as dist


def wrap_data_parallel(model: torch.nn.Module, group, strategy: str, device_type: str = "cpu"):
    if group is None or dist.get_world_size(group) == 1:
        return model
    if strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel
        return DistributedDataParallel(model, process_group=group)
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard
    mesh = DeviceMesh.from_group(group, device_type)
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return getattr(model, "module", model)


def full_state(model: torch.nn.Module, strategy: str) -> dict[str, torch.Tensor]:
    """Unsharded parameters by name. Collective under fsdp2 (every trainer rank calls it)."""
    if strategy == "fsdp2" and hasattr(model, "reshard"):
        # DTensor.full_tensor() all-gathers over the trainer's mesh only. (DCP's
        # get_model_state_dict(cpu_offload=True) keeps tensors on *global* rank 0, which is
        # not the trainer's rank 0 here.)
        return {n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach()
                for n, p in model.named_parameters()}
    return {n: p.detach() for n, p in unwrap(model).named_parameters()}


def local_shards(model: torch.nn.Module, world: int, rank: int) -> dict[str, torch.Tensor]:
    """This trainer rank's dim-0 rows of every parameter, without any collective.

    Under FSDP2 that is the rank's own shard (``DTensor.to_local()``). A DDP replica holds
    everything but sends only the rows FSDP would give it, so the DDMA sync still leaves all
    trainer ranks in parallel with no duplicated bytes.
    """
    from llamarl_core.transport.ddma_plan import fsdp_rows

    out = {}
    for n, p in unwrap(model).named_parameters():
        if hasattr(p, "to_local"):
            out[n] = p.detach().to_local()
        else:
            lo, hi = fsdp_rows(p.shape[0], world, rank) if p.dim() else (0, 1)
            out[n] = p.detach()[lo:hi] if p.dim() else p.detach()
    return out
