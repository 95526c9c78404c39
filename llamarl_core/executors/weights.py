"""Wire the DDMA weight sync (transport/ddma.py) to a run: transport, plan, ranks, dtypes.

Both ends build the same plan from the config alone: the trainer's parameter names and
shapes, T trainer ranks (each sending the rows of its FSDP dim-0 shard; under HSDP the
shard of its replica, `trainer_shards`), G generator
ranks, the generators' dtype (conversion on the way) and their TP slices; an fp8 generator's
quantized linears travel as fp8 with per-row scales (executors/fp8_weights.py). `auto` picks
shared memory on a single CPU host, CUDA IPC slots when generator and trainer share one GPU
(`resources.share_devices`), and point-to-point gloo/NCCL everywhere else.
Endpoints live under the generator role's membership epoch (`xfer/<epoch>/...`, 0 until a
restart): new generator ranks build a receiver there, the trainer ranks a new sender, and
the trainer sends its current weights before anything is generated (executors/rejoin.py).
"""
from __future__ import annotations

import time

import torch

from llamarl_core.config.layout import trainer_sharding
from llamarl_core.executors.context import Stopped, WorkerContext
from llamarl_core.executors.fp8_weights import engine_quantizes
from llamarl_core.generation.fused import fused_param_groups
from llamarl_core.models.dtypes import TORCH_DTYPES
from llamarl_core.transport.ddma import DdmaReceiver, DdmaSender
from llamarl_core.transport.control import connect_run
from llamarl_core.transport.ddma_plan import DdmaPlan, build_plan, piece_bytes
from llamarl_core.transport.membership import MembershipChanged, role_epoch

POLL_S = 0.01


def generator_epoch(ctx: WorkerContext) -> int:
    return role_epoch(ctx.control.store, "generator")


def transport(ctx: WorkerContext) -> str:
    t = ctx.cfg.controller.weight_transport
    if t != "auto":
        return t
    if ctx.cfg.resources.share_devices:  # one GPU for both: NCCL refuses two ranks on a device
        return "cuda_ipc"
    return "shm" if ctx.cfg.resources.device == "cpu" and ctx.plan.get("nodes", 1) == 1 else "collective"


def generator_tp(ctx: WorkerContext) -> int:
    """TP ranks per generator replica; generator rank g is TP rank g % tp (executors/replica.py)."""
    return ctx.generator_tp


def plan(ctx: WorkerContext, named_shapes: dict[str, tuple[tuple[int, ...], torch.dtype]], args) -> DdmaPlan:
    """`args`: the model's ModelArgs; generator TP slices are `models/tp_slices.tp_slice`."""
    return build_plan(named_shapes, trainer_ranks=len(ctx.ranks("trainer")), trainer_shards=trainer_shards(ctx),
                      generator_ranks=len(ctx.ranks("generator")), tp_size=generator_tp(ctx), args=args,
                      dtype=TORCH_DTYPES[ctx.cfg.resources.generator.dtype],
                      max_piece_bytes=piece_bytes(ctx.cfg.controller.weight_bucket_mb),
                      fp8=engine_quantizes if fp8_wire(ctx) else None,
                      num_slots=ctx.cfg.resources.generator.weight_slots,
                      groups=fused_param_groups(named_shapes))  # the engine computes from the slot


def trainer_shards(ctx: WorkerContext) -> int:
    """Ranks one copy of the trainer's weights is split over, as `parallel.wrap_data_parallel`
    builds it: the FSDP group under fsdp2 (HSDP: T/fsdp replicas of it), else every rank (DDP
    replicas each send 1/T of the rows, `parallel.local_shards`)."""
    t, world = ctx.cfg.resources.trainer, len(ctx.ranks("trainer"))
    fsdp, _ = trainer_sharding(t, world)
    return fsdp if t.strategy == "fsdp2" and fsdp > 1 else world


def transfer_client(ctx: WorkerContext):
    """A store client for the weight-sync endpoints alone: their receiving thread blocks in
    it, and a TCPStore client serialises its callers, so sharing the role loop's client
    would freeze that loop (and NCCL's lazy set-up would wait behind it)."""
    c = ctx.plan["controller"]
    return connect_run(c["host"], c["port"], ctx.run_id, ctx.cfg.controller.startup_timeout_s)


def fp8_wire(ctx: WorkerContext) -> bool:
    """An fp8 generator gets fp8 weights and per-row scales on the wire (executors/fp8_weights.py)."""
    return ctx.cfg.resources.generator.quantization == "fp8"


def make_sender(ctx: WorkerContext, model: torch.nn.Module, epoch: int) -> DdmaSender:
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
    shapes = {n: (tuple(p.shape), p.dtype) for n, p in model.named_parameters()}
    device = next(model.parameters()).device
    return DdmaSender(plan(ctx, shapes, model.args), ctx.local_rank, transport=transport(ctx), store=transfer_client(ctx),
                      epoch=epoch, device=device, timeout_s=ctx.cfg.controller.step_timeout_s,
                      interrupt=interrupt)


def make_receiver(ctx: WorkerContext, params: dict[str, torch.Tensor], full: dict[str, torch.Tensor],
                  args) -> DdmaReceiver:
    """`params`: this rank's (TP-sliced) parameters; `full`: the unsharded shapes, as the trainer has them."""
    trainer_dtype = TORCH_DTYPES[ctx.cfg.resources.trainer.dtype]
    shapes = {n: (tuple(p.shape), trainer_dtype) for n, p in full.items()}
    epoch = generator_epoch(ctx)
    ctx.control.store.set(f"xfer/{epoch}/joined/{ctx.local_rank}", "1")  # the trainer waits for it
    return DdmaReceiver(plan(ctx, shapes, args), ctx.local_rank, params, transport=transport(ctx),
                        store=transfer_client(ctx), epoch=epoch, run_id=ctx.run_id,
                        timeout_s=ctx.cfg.controller.step_timeout_s)
