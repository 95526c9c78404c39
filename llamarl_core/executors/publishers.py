"""How the trainer loop hands out a new version, one class per mode (see `TrainerExecutor`).

    WeightSync  (async): DDMA, every trainer rank sends the rows it owns straight to the
        generator ranks that need them (no gather; transport/ddma.py); a LoRA run sends
        the adapters alone (executors/adapter_sync.py).
    InPlace     (sync):  the colocated engine already shares the trained module; it only
        refreshes what it derived from the weights, and rank 0 announces the version.
Both return the metrics of the publish (empty when nothing moved).

`rejoin(version)`: new generator ranks (a restart) get a sender of their epoch and `version`
before they generate; a publish that finds its generators gone waits for the verdict (`on_broken`).
"""
from __future__ import annotations

from llamarl_core.executors.context import RoleRuntime
from llamarl_core.executors.weights import WeightSyncConfig, generator_epoch, make_sender
from llamarl_core.generation.fp8_weights import engine_quantizes
from llamarl_core.models.dtypes import TORCH_DTYPES
from llamarl_core.transport import checksums
from llamarl_core.transport.membership import MembershipChanged
from llamarl_core.transport.parallel import full_state, local_shards, unwrap


class WeightSync:
    def __init__(self, ctx: RoleRuntime, cfg: WeightSyncConfig, strategy: str, rank: int, model, raw):
        """`strategy`: resources.trainer.strategy (how the checksums gather the weights)."""
        self.ctx, self.cfg, self.strategy = ctx, cfg, strategy
        self.rank, self.model, self.args = rank, model, raw.args
        self.world = len(ctx.ranks("trainer"))
        self.on_broken = None  # set by the trainer: waits for the controller's verdict
        self.abandoned: list = []  # senders of replaced epochs: never closed (their peers are gone)
        self.sender = self._build()  # every trainer rank sends its own rows

    def _build(self):
        while True:
            try:
                return make_sender(self.ctx, self.cfg, unwrap(self.model), generator_epoch(self.ctx))
            except MembershipChanged:
                continue  # replaced again while joining: join the newest

    def _current(self) -> bool:
        if self.sender.epoch == generator_epoch(self.ctx):
            return True
        self.abandoned.append(self.sender)
        self.sender = self._build()
        return False

    def rejoin(self, version: int) -> dict:
        """New generators: a sender for them, then `version`; {} if this sender is current."""
        if self._current():
            return {}
        return self._stats(self._send(version))

    def _send(self, version: int):
        while True:
            self._current()
            try:
                return self.sender.send(self._local(), version)
            except MembershipChanged:
                continue
            except RuntimeError as e:  # collective: a generator died mid-send
                if self.on_broken is None:
                    raise
                self.on_broken(e)

    def _local(self) -> dict:
        """This rank's rows of what travels: every parameter, or the adapters (LoRA)."""
        return {n: t for n, t in local_shards(self.model, self.world, self.rank).items() if self.cfg.travels(n)}

    def publish(self, version: int) -> dict:
        cfg, ctx = self.cfg, self.ctx
        with ctx.timeline.span("sync", version=version):
            stats = self._send(version)
            if self.rank == 0:
                ctx.control.publish_version(version)
        if cfg.checksums:  # a test aid: gathers the full weights (never on the sync path)
            state = full_state(self.model, self.strategy)
            state = {n: t for n, t in state.items() if cfg.travels(n)}  # what the generators received
            if self.rank == 0:
                wire = TORCH_DTYPES[cfg.generator_dtype]
                state = {n: t.to(wire) for n, t in state.items()}
                fp8 = engine_quantizes if cfg.fp8 else None  # what the generators hold
                if ctx.generator_tp > 1:  # the slices each generator TP rank keeps
                    checksums.record_slices(ctx.run_dir, "trainer", self.rank, version, state,
                                            self.args, ctx.generator_tp, fp8=fp8)
                else:
                    checksums.record(ctx.run_dir, "trainer", self.rank, version,
                                     checksums.fp8_state(state, fp8) if fp8 else state)
        return self._stats(stats)

    @staticmethod
    def _stats(stats) -> dict:
        return {"sync/seconds": stats.seconds, "sync/gbps": stats.gbps,
                "sync/bytes": stats.bytes, "sync/transport": stats.transport}

    def close(self) -> None:
        if self.sender is not None:
            self.sender.close()


class InPlace:
    def __init__(self, ctx: RoleRuntime, rank: int, feed):
        self.ctx, self.rank, self.feed = ctx, rank, feed
        self.on_broken = None

    def rejoin(self, version: int) -> dict:
        return {}  # no generator role in sync mode

    def publish(self, version: int) -> dict:
        self.feed.weights_changed()
        if self.rank == 0:
            self.ctx.control.publish_version(version)
        return {}

    def close(self) -> None:
        pass
