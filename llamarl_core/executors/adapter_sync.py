"""LoRA weight sync: only the adapters travel, the generator merges them into its own base.

    trainer rank t                                 generator rank g
    ---------------------------------------------  ---------------------------------------------
    DdmaSender over the adapter tensors      <->   AdapterReceiver(DdmaReceiver over a dict of
      (`lora_A.weight` / `lora_B.weight`,            adapter tensors, LoraMerge of its base)
      full shapes: the trainable parameters)
    send(adapter shards, version)                  receive(): adopt the slot, then merge
                                                   W ← W_base + s·B@A into the engine's weights

The DDMA plan is the full-weight one (executors/weights.py) over the adapter tensors alone, so a
sync moves 2·r·(in + out) values per target linear instead of every weight. Version 0 carries
the initial adapters (B = 0: the base; or a PEFT `init_from` adapter); a restarted generator
builds its base and receives the current adapters the same way (executors/rejoin.py).
The merge runs where the receive did, between decode steps (executors/generate_loop.py).
"""
from __future__ import annotations

import torch

from llamarl_core.executors.context import RoleRuntime
from llamarl_core.executors.ports import SyncStatsLike
from llamarl_core.executors.weights import WeightSyncConfig, make_receiver
from llamarl_core.generation.lora_merge import LoraMerge, adapter_shapes
from llamarl_core.models.dtypes import TORCH_DTYPES
from llamarl_core.transport.ddma import DdmaReceiver


class AdapterReceiver:
    """The generator's `WeightReceiver` (executors/ports.py) of a LoRA run: DDMA receives the
    adapters into `params` (views into its slots), each adopted version is merged at once."""

    def __init__(self, receiver: DdmaReceiver, merge: LoraMerge):
        self.receiver, self.merge = receiver, merge
        self.params = receiver.params  # the adapter tensors (the checksums record these)

    def ready(self) -> bool:
        return self.receiver.ready()

    def receive(self) -> SyncStatsLike:
        stats = self.receiver.receive()
        self.merge.apply(self.params)
        return stats

    def close(self) -> None:
        self.receiver.close()


def make_adapter_receiver(ctx: RoleRuntime, cfg: WeightSyncConfig, model: torch.nn.Module, rank: int,
                          targets, scale: float) -> AdapterReceiver:
    """On a generator rank holding the plain base `model` (built, not received; TP 1): receive
    the adapters in the generators' dtype and merge them into `model`'s target linears."""
    device = next(model.parameters()).device
    shapes = adapter_shapes(model, rank, targets, TORCH_DTYPES[cfg.generator_dtype])
    params = {n: torch.zeros(s, dtype=d, device=device) for n, (s, d) in shapes.items()}
    merge = LoraMerge(model, targets, scale)
    return AdapterReceiver(make_receiver(ctx, cfg, params, params, model.args), merge)
