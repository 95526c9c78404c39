"""How the trainer loop gets step v's rows, one class per mode (handed to `TrainerExecutor`).

    RewardFeed (async, k >= 1): receive this rank's rows of every generator replica that feeds
        it, from that replica's reward rank; a chunk older than v - k is dropped and counted.
    OwnChunks  (sync, k = 0):   generate this rank's own chunk with the weights it trains, have
        the reward role score it, train on it. Always on-policy.

`start()` is called once version 0 is published: no chunk can arrive before that, and a
receive posted earlier would wait through the warm start and first eval (and time out).
"""
from __future__ import annotations

import time

import torch

from llamarl_core.executors.chunks import ChunkGenerator
from llamarl_core.executors.context import Stopped, WorkerContext
from llamarl_core.executors.routing import chunk_slices_for_trainers, replicas_for_trainer
from llamarl_core.transport.channels import TAG_TO_REWARD, TAG_TO_TRAINER_BASE, AsyncReceiver, AsyncSender
from llamarl_core.wire.rollout import Rollout, concat, staleness_per_row

Collected = tuple[Rollout, torch.Tensor, float]  # (rows, staleness per row, seconds waited)


def counts_drops_of(rank: int, replicas: int, trainers: int, prompts: int, group_size: int) -> set[int]:
    """Replicas whose dropped chunks this trainer rank counts: the first rank each one feeds.

    Every rank a replica feeds drops the same chunk (same version, same rule), so exactly one
    of them adds it to `dropped/<replica>`, which the generator's credit rule reads.
    """
    return {i for i in range(replicas)
            if chunk_slices_for_trainers(i, replicas, trainers, prompts, group_size)[0][0] == rank}


class RewardFeed:
    def __init__(self, ctx: WorkerContext, rank: int, world: int):
        a = ctx.cfg.algorithm
        self.ctx, self.rank, self.replicas = ctx, rank, ctx.generator_replicas
        self.sources = replicas_for_trainer(rank, self.replicas, world, a.prompts_per_step)
        self.counted = counts_drops_of(rank, self.replicas, world, a.prompts_per_step, a.group_size)
        self.inboxes: dict[int, AsyncReceiver] = {}
        self.next_chunk: dict[int, int] = {}  # replica → its next chunk to train (data position)

    def start(self) -> None:
        self.inboxes = {i: AsyncReceiver(self.ctx.reward_rank_for(i), TAG_TO_TRAINER_BASE + i)
                        for i in self.sources}

    def collect(self, step: int, version: int) -> Collected:
        ctx, k = self.ctx, self.ctx.cfg.algorithm.max_offpolicy_steps
        chunks, t0 = [], time.time()
        with ctx.timeline.span("wait", step=step):
            for i, inbox in self.inboxes.items():
                while True:
                    r = inbox.get(ctx.should_stop)
                    if r is None:
                        raise Stopped()
                    self.next_chunk[i] = r.chunk + 1  # consumed: trained now, or dropped
                    if r.policy_version >= version - k:
                        chunks.append(r)
                        break
                    if i in self.counted:
                        ctx.control.add_dropped(i)
        return concat(chunks), staleness_per_row(chunks, version), time.time() - t0

    def close(self) -> None:
        pass


class OwnChunks:
    def __init__(self, ctx: WorkerContext, rank: int, world: int, model, tokenizer, prompts):
        self.ctx, self.rank, self.replicas = ctx, rank, world
        self.chunks = ChunkGenerator(ctx.cfg, model, tokenizer, prompts, rank, world,
                                     ctx.cfg.resources.generator.quantization)
        self.outbox = AsyncSender("actor-sender")
        self.inbox: AsyncReceiver | None = None
        self.next_chunk: dict[int, int] = {}  # chunk n is step n: the data position

    def start(self) -> None:
        self.inbox = AsyncReceiver(self.ctx.reward_rank_for(self.rank), TAG_TO_TRAINER_BASE + self.rank)

    def collect(self, step: int, version: int) -> Collected:
        ctx, t0 = self.ctx, time.time()
        with ctx.timeline.span("generate", step=step, version=version):
            rollout = self.chunks.generate(step, version)
        self.outbox.send(rollout, ctx.reward_rank_for(self.rank), TAG_TO_REWARD)
        with ctx.timeline.span("wait", step=step):
            scored = self.inbox.get(ctx.should_stop)
        if scored is None:
            raise Stopped()
        self.next_chunk[self.rank] = step + 1
        ctx.control.set_stats("generator", self.rank,
                              {**self.chunks.stats(since=ctx.timeline.t_start), **ctx.timeline.totals()})
        return scored, staleness_per_row([scored], version), time.time() - t0

    def weights_changed(self) -> None:
        self.chunks.engine.refresh_weights()  # the engine shares the trained module

    def close(self) -> None:
        pass
