"""How the trainer loop hands out a new version, one class per mode (see `TrainerExecutor`).

    WeightSync  (async): trainer rank 0 sends the full weights to every generator (the
        gather under FSDP2 is a collective, so every trainer rank takes part).
    InPlace     (sync):  the colocated engine already shares the trained module; it only
        refreshes what it derived from the weights, and rank 0 announces the version.
Both return the metrics of the publish (empty when nothing moved).
"""
from __future__ import annotations

from llamarl_core.executors.context import WorkerContext
from llamarl_core.models.dtypes import TORCH_DTYPES
from llamarl_core.executors.weights import make_sender
from llamarl_core.transport import checksums
from llamarl_core.transport.parallel import full_state


class WeightSync:
    def __init__(self, ctx: WorkerContext, rank: int, model, raw):
        self.ctx, self.rank, self.model = ctx, rank, model
        self.sender = make_sender(ctx, dict(raw.named_parameters())) if rank == 0 else None

    def publish(self, version: int) -> dict:
        cfg = self.ctx.cfg
        state = full_state(self.model, cfg.resources.trainer.strategy, keep=self.rank == 0)
        if self.sender is None:
            return {}
        with self.ctx.timeline.span("sync", version=version):
            self.ctx.control.publish_version(version)
            stats = self.sender.send(state, version, timeout_s=cfg.controller.step_timeout_s)
        if cfg.run.weight_checksums:  # hash what the generators hold: the state in their dtype
            held = TORCH_DTYPES[cfg.resources.generator.dtype]
            checksums.record(self.ctx.run_dir, "trainer", self.rank, version,
                             {n: t.to(held) for n, t in state.items()})
        return {"sync/seconds": round(stats.seconds, 5), "sync/gbps": round(stats.gbps, 4),
                "sync/bytes": stats.bytes, "sync/transport": stats.transport}

    def close(self) -> None:
        if self.sender is not None:
            self.sender.close()


class InPlace:
    def __init__(self, ctx: WorkerContext, rank: int, feed):
        self.ctx, self.rank, self.feed = ctx, rank, feed

    def publish(self, version: int) -> dict:
        self.feed.weights_changed()
        if self.rank == 0:
            self.ctx.control.publish_version(version)
        return {}

    def close(self) -> None:
        pass
