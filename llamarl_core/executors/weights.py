"""Wire the DDMA weight sync (transport/ddma.py) to a run: transport, plan, ranks, dtypes.

Both ends build the same plan from a `WeightSyncConfig` alone: the trainer's parameter names and
shapes, T trainer ranks (each sending the rows of its FSDP dim-0 shard; under HSDP the
shard of its replica, `trainer_shards`), G generator
ranks, the generators' dtype (conversion on the way) and their TP slices; an fp8 generator's
quantized linears travel as fp8 with per-row scales (generation/fp8_weights.py). `auto` picks
shared memory on a single CPU host, CUDA IPC slots when generator and trainer share one GPU
(`resources.share_devices`), and point-to-point gloo/NCCL everywhere else.
A LoRA run (`adapters_only`) plans over the adapter tensors alone (executors/adapter_sync.py).
Endpoints live under the generator role's membership epoch (`xfer/<epoch>/...`, 0 until a
restart: executors/rejoin.py).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from llamarl_core.executors.context import RoleRuntime, Stopped
from llamarl_core.generation.fp8_weights import engine_quantizes
from llamarl_core.generation.fused import fused_param_groups
from llamarl_core.models.dtypes import TORCH_DTYPES
from llamarl_core.models.lora import is_adapter
from llamarl_core.transport.ddma import DdmaReceiver, DdmaSender
from llamarl_core.transport.ddma_plan import DdmaPlan, build_plan, piece_bytes
from llamarl_core.transport.membership import MembershipChanged, role_epoch

POLL_S = 0.01


@dataclass(frozen=True)
class WeightSyncConfig:
    """What both ends of the weight sync read (built by executors/pipeline.py:
    `weight_sync_config`), so trainer and generator ranks build the same plan."""

    transport: str        # collective | shm | cuda_ipc (controller.weight_transport, `auto` resolved)
    generator_dtype: str  # resources.generator.dtype: what the generators hold (conversion on the way)
    trainer_dtype: str    # resources.trainer.dtype: what the trainer sends
    fp8: bool             # resources.generator.quantization == fp8: quantized linears travel as fp8
    bucket_mb: float      # controller.weight_bucket_mb
    num_slots: int        # resources.generator.weight_slots
    trainer_shards: int   # ranks one copy of the trainer's weights is split over (`trainer_shards`)
    checksums: bool = False  # run.weight_checksums: record a sha256 of the weights at every sync
    adapters_only: bool = False  # model.lora.rank > 0: only the LoRA adapters travel (adapter_sync.py)

    def travels(self, name: str) -> bool:
        """Whether parameter `name` is sent at a sync: every one, or with LoRA the adapters alone."""
        return not self.adapters_only or is_adapter(name)


def synced_shapes(cfg: WeightSyncConfig, model: torch.nn.Module) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Name → (full shape, dtype) of what the trainer sends: every parameter, or the adapters alone."""
    return {n: (tuple(p.shape), p.dtype) for n, p in model.named_parameters() if cfg.travels(n)}


def generator_epoch(ctx: RoleRuntime) -> int:
    return role_epoch(ctx.control.store, "generator")


def plan(ctx: RoleRuntime, cfg: WeightSyncConfig, named_shapes: dict[str, tuple[tuple[int, ...], torch.dtype]],
         args) -> DdmaPlan:
    """`args`: the model's ModelArgs; generator TP slices are `models/tp_slices.tp_slice`
    (generator rank g is TP rank g % tp, executors/replica.py)."""
    return build_plan(named_shapes, trainer_ranks=len(ctx.ranks("trainer")), trainer_shards=cfg.trainer_shards,
                      generator_ranks=len(ctx.ranks("generator")), tp_size=ctx.generator_tp, args=args,
                      dtype=TORCH_DTYPES[cfg.generator_dtype],
                      max_piece_bytes=piece_bytes(cfg.bucket_mb),
                      fp8=engine_quantizes if cfg.fp8 else None,
                      num_slots=cfg.num_slots,
                      groups=fused_param_groups(named_shapes))  # the engine computes from the slot


def transfer_client(ctx: RoleRuntime):
    """A store client for the weight-sync endpoints alone: their receiving thread blocks in
    it, and a TCPStore client serialises its callers, so sharing the role loop's client
    would freeze that loop (and NCCL's lazy set-up would wait behind it)."""
    return ctx.address.connect()


def make_sender(ctx: RoleRuntime, cfg: WeightSyncConfig, model: torch.nn.Module, epoch: int) -> DdmaSender:
    """On every trainer rank (full shapes: a DTensor's .shape is the global one), for the
    generators of `epoch`; MembershipChanged if they are replaced before it is built."""
    def interrupt() -> bool:
        if ctx.should_stop():  # also marks this rank's progress while it waits
            raise Stopped()
        return generator_epoch(ctx) != epoch

    keys = [f"xfer/{epoch}/joined/{g}" for g in range(len(ctx.ranks("generator")))]
    while not ctx.control.store.check(keys):  # new generators may take long to build their model
        if interrupt():
            raise MembershipChanged(f"generator epoch {epoch} was replaced before it joined")
        time.sleep(POLL_S)
    shapes = synced_shapes(cfg, model)
    device = next(model.parameters()).device
    return DdmaSender(plan(ctx, cfg, shapes, model.args), ctx.local_rank, transport=cfg.transport,
                      store=transfer_client(ctx), epoch=epoch, device=device, timeout_s=ctx.step_timeout_s,
                      interrupt=interrupt, run_id=ctx.address.run_id)


def make_receiver(ctx: RoleRuntime, cfg: WeightSyncConfig, params: dict[str, torch.Tensor],
                  full: dict[str, torch.Tensor], args) -> DdmaReceiver:
    """`params`: this rank's (TP-sliced) parameters; `full`: the unsharded shapes, as the trainer has them."""
    trainer_dtype = TORCH_DTYPES[cfg.trainer_dtype]
    shapes = {n: (tuple(p.shape), trainer_dtype) for n, p in full.items()}
    epoch = generator_epoch(ctx)
    ctx.control.store.set(f"xfer/{epoch}/joined/{ctx.local_rank}", "1")  # the trainer waits for it
    return DdmaReceiver(plan(ctx, cfg, shapes, args), ctx.local_rank, params, transport=cfg.transport,
                        store=transfer_client(ctx), epoch=epoch, run_id=ctx.address.run_id,
                        timeout_s=ctx.step_timeout_s)
