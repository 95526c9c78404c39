"""The synchronous baseline (k = 0): generation, scoring and training take turns on the
same ranks, like a hybrid engine. Always on-policy: every importance ratio is 1.

    for step v:  generate own chunk with version v → reward role scores it → train (DP)

Same trainer code; only how a batch is collected and the (absent) weight sync differ.
"""
from __future__ import annotations

import time

from llamarl_core.executors.chunks import ChunkGenerator
from llamarl_core.wire.rollout import staleness_per_row
from llamarl_core.executors.trainer import TrainerExecutor
from llamarl_core.transport.channels import TAG_TO_REWARD, AsyncSender
from llamarl_core.executors.context import Stopped, WorkerContext


class ActorExecutor(TrainerExecutor):
    def __init__(self, ctx: WorkerContext):
        super().__init__(ctx)
        self.chunks = ChunkGenerator(self.cfg, self.raw, self.tokenizer, self.train_prompts,
                                     self.rank, self.world, self.cfg.resources.generator.quantization)
        self.outbox = AsyncSender("actor-sender")

    def collect(self, step: int):
        ctx, t0 = self.ctx, time.time()
        with ctx.timeline.span("generate", step=step, version=self.version):
            rollout = self.chunks.generate(step, self.version)
        self.outbox.send(rollout, ctx.reward_rank_for(self.rank), TAG_TO_REWARD)
        with ctx.timeline.span("wait", step=step):
            scored = self.inboxes[self.rank].get(ctx.should_stop)
        if scored is None:
            raise Stopped()
        self.next_chunk[self.rank] = step + 1
        ctx.control.set_stats("generator", self.rank,
                              {**self.chunks.stats(since=ctx.timeline.t_start), **ctx.timeline.totals()})
        return scored, staleness_per_row([scored], self.version), time.time() - t0

    def sync(self) -> None:
        self.chunks.engine.refresh_weights()  # the engine shares the trained module
        self.ctx.control.publish_version(self.version)
