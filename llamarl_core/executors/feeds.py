"""How the trainer loop gets step v's rows, one class per mode (handed to `TrainerExecutor`).

    RewardFeed (async, k >= 1): receive this rank's rows of every generator replica that feeds
        it, from that replica's reward rank; a chunk older than v - k is dropped and counted.
    OwnChunks  (sync, k = 0):   generate this rank's own chunk with the weights it trains, have
        the reward role score it, train on it. Always on-policy.

Dynamic sampling (executors/resample.py) takes more chunks within one step: `collect_more`
consumes one further chunk of every source replica and counts it as a dropped chunk, so the
generator's credit rule (chunk n is trained at step n - dropped) still holds; `agree` is how
the trainer ranks decide together without entering a collective.

`start()` is called once version 0 is published: no chunk can arrive before that, and a
receive posted earlier would wait through the warm start and first eval (and time out).

Restarts (executors/rejoin.py): while a feed waits it calls the trainer's `on_wait()`, which
returns the roles restarted since (after handling what the trainer itself must do, such as
sending the current weights to new generators); a broken link goes to `on_broken(error)`,
which waits for the controller's verdict. A restarted reward role means new links here.
"""
from __future__ import annotations

import time
from typing import Callable

import torch

from llamarl_core.config.streaming import streaming_active
from llamarl_core.executors.chunks import ChunkConfig, ChunkGenerator
from llamarl_core.executors.context import Stopped, WorkerContext
from llamarl_core.executors.routing import chunk_slices_for_trainers, replicas_for_trainer
from llamarl_core.executors import rejoin
from llamarl_core.transport.channels import (TAG_TO_REWARD, TAG_TO_TRAINER_BASE, AsyncReceiver, AsyncSender,
                                             LinkBroken)
from llamarl_core.wire.rollout import Rollout, concat, staleness_per_row

Collected = tuple[Rollout, torch.Tensor, float]  # (rows, staleness per row, seconds waited)


def counts_drops_of(rank: int, replicas: int, trainers: int, prompts: int, group_size: int) -> set[int]:
    """Replicas whose dropped chunks this trainer rank counts: the first rank each one feeds.

    Every rank a replica feeds drops the same chunk (same version, same rule), so exactly one
    of them adds it to `dropped/<replica>`, which the generator's credit rule reads.
    """
    return {i for i in range(replicas)
            if chunk_slices_for_trainers(i, replicas, trainers, prompts, group_size)[0][0] == rank}


def no_restarts() -> set[str]:
    return set()


class _Waits:
    """What both feeds share: waiting on a receiver while restarts are handled."""

    ctx: WorkerContext
    on_wait: Callable[[], set[str]] = staticmethod(no_restarts)

    def on_broken(self, error: BaseException) -> set[str]:
        """A broken link: wait for the controller's verdict (the trainer sets its own)."""
        return rejoin.await_verdict(self.ctx, rejoin.watch(self.ctx, []), error)

    def start(self) -> None:
        self.links = rejoin.links(self.ctx)
        self._open()

    def _get(self, inbox: Callable[[], AsyncReceiver], reopen: Callable[[], None]) -> Rollout | None:
        """The next rollout of `inbox()`; after a reward restart `reopen()` makes new receivers.
        None: a restart cut the wait short (the caller decides what to redo)."""
        restarted: set[str] = set()

        def stop() -> bool:
            if self.ctx.should_stop():
                raise Stopped()
            restarted.update(self.on_wait())
            return bool(restarted)
        try:
            got = inbox().get(stop)
        except LinkBroken as e:
            restarted = self.on_broken(e)
            got = None
        if "reward" in restarted:
            reopen()
        return got

    def agree(self, key: str, value) -> list:
        """Every trainer rank's `value` (JSON) for `key`, in rank order. Through the store, like
        `wait_for_peers`: a rank waiting here still serves restarts, which an all-gather would
        not let it do while a peer waits for rows from a restarted generator."""
        if self.world == 1:
            return [value]
        control = self.ctx.control
        control.set_json(f"{key}/{self.rank}", value)
        control.store.add(f"{key}/n", 1)
        while control.get_int(f"{key}/n") < self.world:
            if self.ctx.should_stop():
                raise Stopped()
            if "reward" in self.on_wait():
                self._open()
            time.sleep(0.005)
        return [control.get_json(f"{key}/{r}") for r in range(self.world)]


class RewardFeed(_Waits):
    def __init__(self, ctx: WorkerContext, rank: int, world: int):
        a = ctx.cfg.algorithm
        self.ctx, self.rank, self.world, self.replicas = ctx, rank, world, ctx.generator_replicas
        self.sources = replicas_for_trainer(rank, self.replicas, world, a.prompts_per_step)
        self.counted = counts_drops_of(rank, self.replicas, world, a.prompts_per_step, a.group_size)
        self.inboxes: dict[int, AsyncReceiver] = {}
        self.next_chunk: dict[int, int] = {}  # replica → its next chunk to train (data position)
        # Streaming generators (executors/stream.py) can complete chunk n+1 before chunk n:
        # such a chunk waits here until its turn (replica → chunk → rows).
        self.ahead: dict[int, dict[int, Rollout]] | None = {} if streaming_active(ctx.cfg) else None

    def _open(self) -> None:
        self.links.drop("reward")
        me = rejoin.my_endpoint(self.ctx)
        self.inboxes = {i: AsyncReceiver(self.links.get(rejoin.endpoint(self.ctx, "reward", self.ctx.reward_rank_for(i)),
                                                        me, sending=False), TAG_TO_TRAINER_BASE + i)
                        for i in self.sources}

    def collect(self, step: int, version: int) -> Collected:
        chunks, t0 = [], time.time()
        with self.ctx.timeline.span("wait", step=step):
            for i in self.sources:
                chunks.append(self._next_fresh(i, version))
        return concat(chunks), staleness_per_row(chunks, version), time.time() - t0

    def collect_more(self, step: int, version: int) -> Collected:
        """One more chunk of every source replica within step `step`; each counts as dropped."""
        rows, staleness, waited_s = self.collect(step, version)
        for i in self.sources:
            if i in self.counted:
                self.ctx.control.add_dropped(i)
        return rows, staleness, waited_s

    def _next_fresh(self, i: int, version: int):
        """Replica i's next chunk within k versions of `version`; older ones are dropped and counted."""
        ctx, k = self.ctx, self.ctx.cfg.algorithm.max_offpolicy_steps
        while True:
            want = self.next_chunk.get(i, 0)
            r = self.ahead.setdefault(i, {}).pop(want, None) if self.ahead is not None else None
            if r is None:
                r = self._get(lambda: self.inboxes[i], self._open)
            if r is None or r.chunk < want:
                continue  # a restart cut the wait short, or a chunk consumed before it came again
            if self.ahead is not None and r.chunk > want:
                self.ahead[i][r.chunk] = r  # streamed ahead of chunk `want`: its turn comes
                continue
            self.next_chunk[i] = r.chunk + 1  # consumed: trained now, or dropped
            ctx.control.set_expected(i, self.rank, r.chunk + 1)
            if r.policy_version >= version - k:
                return r
            if i in self.counted:
                ctx.control.add_dropped(i)

    def wait_for_peers(self, step: int) -> None:
        """Every trainer rank has its rows of `step` before any enters the step's collectives:
        a rank stuck in an all-reduce could not join the weight sync that new generators
        need before they can produce the rows its peer still waits for."""
        if self.world == 1:
            return
        key = f"collected/{step}"
        self.ctx.control.store.add(key, 1)
        while self.ctx.control.get_int(key) < self.world:
            if self.ctx.should_stop():
                raise Stopped()
            if "reward" in self.on_wait():
                self._open()
            time.sleep(0.005)

    def close(self) -> None:
        pass


class OwnChunks(_Waits):
    def __init__(self, ctx: WorkerContext, chunk_cfg: ChunkConfig, rank: int, world: int, model, tokenizer,
                 prompts):
        self.ctx, self.rank, self.world, self.replicas = ctx, rank, world, world
        self.chunks = ChunkGenerator(chunk_cfg, model, tokenizer, prompts, rank, world,
                                     ctx.cfg.resources.generator.quantization)
        self.outbox = AsyncSender("actor-sender")
        self.inbox: AsyncReceiver | None = None
        self.next_chunk: dict[int, int] = {}  # this rank's next chunk (= step without resampling)

    def _open(self) -> None:
        """Links to and from this rank's reward rank, in the epochs of now."""
        self.links.drop("reward")
        me = rejoin.my_endpoint(self.ctx)
        reward = rejoin.endpoint(self.ctx, "reward", self.ctx.reward_rank_for(self.rank))
        self.outbox = AsyncSender("actor-sender")
        self.to_reward = self.links.get(me, reward, sending=True)
        self.inbox = AsyncReceiver(self.links.get(reward, me, sending=False), TAG_TO_TRAINER_BASE + self.rank)

    def collect(self, step: int, version: int) -> Collected:
        ctx, t0 = self.ctx, time.time()
        chunk = self.next_chunk.get(self.rank, step)
        with ctx.timeline.span("generate", step=step, version=version):
            rollout = self.chunks.generate(chunk, version)
        scored, send = None, True
        while scored is None:  # sent again when the reward role was restarted meanwhile
            if send:
                try:
                    self.outbox.send(rollout, self.to_reward, TAG_TO_REWARD)
                    send = False
                except LinkBroken as e:
                    if "reward" in self.on_broken(e):
                        self._open()
                    continue
            inbox = self.inbox
            with ctx.timeline.span("wait", step=step):
                scored = self._get(lambda: self.inbox, self._open)
            send = self.inbox is not inbox  # new links: the new reward rank never saw it
        self.next_chunk[self.rank] = chunk + 1
        ctx.control.set_stats("generator", self.rank,
                              {**self.chunks.stats(since=ctx.timeline.t_start), **ctx.timeline.totals()})
        return scored, staleness_per_row([scored], version), time.time() - t0

    def collect_more(self, step: int, version: int) -> Collected:
        """One more chunk, generated now with the weights being trained; counted as dropped."""
        collected = self.collect(step, version)
        self.ctx.control.add_dropped(self.rank)
        return collected

    def weights_changed(self) -> None:
        self.chunks.engine.refresh_weights()  # the engine shares the trained module

    def wait_for_peers(self, step: int) -> None:
        pass  # no generator role to restart: nothing to wait for

    def close(self) -> None:
        pass
