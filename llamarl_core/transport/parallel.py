"""Trainer parallelism, applied from outside the model (torchtitan's `parallelize.py` style).

    resources.trainer            what wrap_data_parallel builds
    strategy=ddp                 DistributedDataParallel over the trainer group
    strategy=fsdp2, dp=1         fully_shard on the embedding, per block, on [norm, output]
                                 and the root, on a 1-D mesh (FSDP, ZeRO-3)
    strategy=fsdp2, dp>1         fully_shard on a 2-D mesh (dp_replicate x dp_shard) = HSDP:
                                 ranks [i*fsdp, (i+1)*fsdp) shard one replica (one node on
                                 GPUs, so the reduce-scatter stays on NVLink), replicas
                                 all-reduce across
    dtype=bfloat16|float16       fp32 master weights and optimizer state, 16-bit compute:
                                 FSDP2 MixedPrecisionPolicy (16-bit params, fp32 gradient
                                 reduction); elsewhere torch.autocast around the forward
    activation_checkpointing     each transformer block's forward recomputed in backward

Checkpointing replaces the block's `forward` on the instance rather than wrapping the module
(torch's checkpoint_wrapper), so parameter names stay those of the plain model: the weight
sync and checkpoints address parameters by name.

`full_state` gives rank 0 the unsharded weights for eval and checkpoints; the weight sync
never gathers: `local_shards` hands each rank's own rows to the DDMA sender.
"""
from __future__ import annotations

import functools

import torch
import torch.distributed as dist
from torch.utils.checkpoint import checkpoint

MESH_DIM_NAMES = ("dp_replicate", "dp_shard")


def apply_activation_checkpointing(model: torch.nn.Module) -> torch.nn.Module:
    """Recompute each block's activations in backward instead of keeping them."""
    for block in model.layers:
        if getattr(block, "_llamarl_checkpointed", False):
            continue
        block.forward = functools.partial(checkpoint, block.forward, use_reentrant=False)
        block._llamarl_checkpointed = True
    return model


def apply_autocast(model: torch.nn.Module, dtype: torch.dtype, device_type: str) -> torch.nn.Module:
    """16-bit compute over fp32 parameters, for layouts FSDP2's mixed precision does not cover."""
    inner = model.forward

    @functools.wraps(inner)
    def forward(*args, **kwargs):
        with torch.autocast(device_type=device_type, dtype=dtype):
            return inner(*args, **kwargs)

    model.forward = forward
    return model


def trainer_mesh(group, dp: int, fsdp: int, device_type: str):
    """The trainer's DeviceMesh: 1-D over the group when dp == 1, else 2-D (dp x fsdp).

    Row i of the grid (ranks i*fsdp .. i*fsdp + fsdp - 1 of the group) shards one replica;
    column j holds the replicas of shard j. Sub-groups are made by their members only
    (use_local_synchronization), so other roles need not take part.
    """
    from torch.distributed.device_mesh import DeviceMesh

    ranks = dist.get_process_group_ranks(group)
    if dp * fsdp != len(ranks):
        raise ValueError(f"trainer mesh dp={dp} x fsdp={fsdp} != {len(ranks)} trainer ranks")
    if dp == 1:
        return DeviceMesh.from_group(group, device_type)
    grid = torch.tensor(ranks).view(dp, fsdp)
    row, col = divmod(ranks.index(dist.get_rank()), fsdp)
    shard_group = dist.new_group(grid[row].tolist(), use_local_synchronization=True)
    replicate_group = dist.new_group(grid[:, col].tolist(), use_local_synchronization=True)
    return DeviceMesh.from_group([replicate_group, shard_group], device_type, mesh=grid,
                                 mesh_dim_names=MESH_DIM_NAMES)


def wrap_data_parallel(model: torch.nn.Module, group, strategy: str, device_type: str = "cpu", *,
                       dp: int = 0, compute_dtype: torch.dtype = torch.float32,
                       activation_checkpointing: bool = False) -> torch.nn.Module:
    """Apply the planned layout; `dp` = replicas of the sharded model (0: all ranks shard)."""
    if activation_checkpointing:
        apply_activation_checkpointing(model)
    world = 1 if group is None else dist.get_world_size(group)
    mixed = compute_dtype != torch.float32
    dp = dp or 1
    if strategy == "fsdp2" and world // dp > 1:  # fsdp=1 (replicas only) is DDP's layout: built as DDP
        return apply_fsdp(model, trainer_mesh(group, dp, world // dp, device_type), compute_dtype)
    if mixed:
        apply_autocast(model, compute_dtype, device_type)
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel
        return DistributedDataParallel(model, process_group=group)
    return model


def apply_fsdp(model: torch.nn.Module, mesh, compute_dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """FSDP2 over `mesh` with 16-bit compute over fp32 master weights when `compute_dtype` says.

    Units as torchtitan's llama parallelize: the embedding, each block, and [norm, output]
    (their backward comes first, so they stay gathered from forward to it), then the root;
    the root alone would keep embedding and head gathered through forward and backward. A
    tied head shares the embedding's parameter: both stay with the root."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    policy = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32) \
        if compute_dtype != torch.float32 else MixedPrecisionPolicy()
    return _shard_units(model, mesh, policy)


def _shard_units(model: torch.nn.Module, mesh, policy) -> torch.nn.Module:
    from torch.distributed.fsdp import fully_shard

    if not model.args.tie_embeddings:
        fully_shard(model.tok_embeddings, mesh=mesh, mp_policy=policy)
    for layer in model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    if not model.args.tie_embeddings:
        fully_shard([model.norm, model.output], mesh=mesh, mp_policy=policy, reshard_after_forward=False)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model


def shard_like(frozen: torch.nn.Module, trained: torch.nn.Module) -> torch.nn.Module:
    """Lay out `frozen` (same architecture, no gradients: the KL reference) exactly as `trained`
    is: FSDP2 shards on `trained`'s own device mesh where it is FSDP2-sharded (FSDP or HSDP),
    so each rank holds the same rows of both; otherwise unchanged, a whole copy per rank as DDP
    replicas hold. Weights are gathered in `frozen`'s own dtype (no optimizer, no master copy)."""
    mesh = getattr(next(unwrap(trained).parameters()), "device_mesh", None)
    if mesh is None:
        return frozen
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return _shard_units(frozen, mesh, MixedPrecisionPolicy())


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


@torch.no_grad()
def copy_weights(dst: torch.nn.Module, src: torch.nn.Module) -> None:
    """dst's parameters = src's, name by name, each rank its own part: the two are laid out alike
    (`shard_like`), so nothing is communicated. Casts to dst's dtype."""
    sources = dict(unwrap(src).named_parameters())
    for name, p in unwrap(dst).named_parameters():
        _local(p).copy_(_local(sources[name]))


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return getattr(model, "module", model)


def _gathered(model: torch.nn.Module):
    """(name, unsharded parameter on its device), one gather at a time: collective under
    FSDP2 (every trainer rank iterates in the same order), plain parameters otherwise."""
    for n, p in unwrap(model).named_parameters():
        yield n, (p.full_tensor() if hasattr(p, "full_tensor") else p).detach()


def full_state(model: torch.nn.Module, strategy: str, keep: bool = True) -> dict[str, torch.Tensor]:
    """Unsharded parameters by name. Collective under fsdp2 (every trainer rank calls it);
    ranks that pass keep=False take part in each gather but drop the result at once, so only
    the rank that uses the weights ever holds a full copy."""
    if strategy == "fsdp2" and hasattr(model, "reshard"):
        # DTensor.full_tensor() all-gathers over the trainer's mesh only. (DCP's
        # get_model_state_dict(cpu_offload=True) keeps tensors on *global* rank 0, which is
        # not the trainer's rank 0 here.) Every gather runs, kept or not.
        return {n: full for n, full in _gathered(model) if keep}
    return {n: p.detach() for n, p in unwrap(model).named_parameters()}


def iter_full_tensors(model: torch.nn.Module, keep: bool = True):
    """(name, unsharded parameter) one at a time, moved to the host; ranks with keep=False
    yield (name, None). The device never holds more than one gathered tensor at once."""
    for n, full in _gathered(model):
        yield n, (full.cpu() if keep else None)
        del full


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
