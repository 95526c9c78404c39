"""How the trainer loop gets step v's rows, one class per mode (handed to `TrainerExecutor`).

    RewardFeed (async, k >= 1): receive this rank's rows of every generator replica that feeds
        it, from that replica's reward rank, as complete prompt groups (executors/intake.py):
        step v takes, of each source replica, its slice of that replica's next chunk, chunks in
        order; a copy of a group this rank took or holds already (after a restart) is dropped
        and counted (`trainer/duplicate_dropped_groups`).
    OwnChunks  (sync, k = 0):   generate this rank's own chunk with the weights it trains, have
        the reward role score it, train on it. Always on-policy.

Dynamic sampling (executors/resample.py): `collect_more` counts one extra chunk of every source
replica, then takes it; `agree` is how the trainer ranks decide together without a collective.

`start()` is called once version 0 is published: no chunk can arrive before that, and a
receive posted earlier would wait through the warm start and first eval (and time out).

Restarts (executors/rejoin.py): while a feed waits it calls the trainer's `on_wait()` (the roles
restarted since, after the trainer sent new generators its weights); a broken link goes to
`on_broken(error)`, the controller's verdict. A restarted reward role means new links here.
A feed sees no run config: its `FeedConfig` and `FeedRuntime` (executors/pipeline.py).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch

from llamarl_core.executors.admission import Admission
from llamarl_core.executors.chunks import ChunkConfig, ChunkGenerator
from llamarl_core.executors.context import Stopped
from llamarl_core.executors.intake import GroupIntake
from llamarl_core.executors.ports import Collected, ControlStore
from llamarl_core.executors.routing import chunk_slices_for_trainers, replicas_for_trainer
from llamarl_core.transport.channels import (TAG_TO_REWARD, TAG_TO_TRAINER_BASE, AsyncReceiver, AsyncSender,
                                             LinkBroken)
from llamarl_core.wire.rollout import Rollout, concat, staleness_per_row

# copies of groups already taken or buffered (a restarted generator's), dropped untrained
DUPLICATE_GROUPS_METRIC = "trainer/duplicate_dropped_groups"


@dataclass(frozen=True)
class FeedConfig:
    prompts_per_step: int     # algorithm.prompts_per_step (all trainer ranks together)
    group_size: int           # algorithm.group_size
    max_offpolicy_steps: int  # algorithm.max_offpolicy_steps (k): OwnChunks asks admission.py
    replicas: int             # generator replicas (the sync actor's ranks in sync mode)
    quantization: str = "none"  # resources.generator.quantization (OwnChunks' engine)
    stream_groups: bool = False  # the reward role forwards each group as scored (config/streaming.py)


@dataclass
class FeedRuntime:
    """What a feed uses of the running worker (the pipeline binds these to its context)."""

    control: ControlStore
    timeline: object                                   # transport/timeline.Timeline: .span(...)
    should_stop: Callable[[], bool]
    links: Callable[[], object]                        # a new transport/links.Links
    endpoint: Callable[[str, int], object]             # role, rank → its Endpoint now
    my_endpoint: Callable[[], object]
    reward_rank_for: Callable[[int], int]              # replica → the reward rank scoring it
    await_verdict: Callable[[BaseException], set[str]]  # after a broken link: restarted roles


def merge_positions(views: list[dict], control: ControlStore) -> dict:
    """Every trainer rank's `position()` → the checkpoint's data fields: where each replica
    resumes (the first chunk some rank has not consumed), its extra chunks, each rank's own
    position (its groups trained beyond that are skipped when they come again) and the
    duplicate groups dropped so far."""
    replicas = sorted({int(i) for v in views for i in v["next_chunk"]})
    next_chunk = {i: min(v["next_chunk"][i] for v in views if i in v["next_chunk"]) for i in replicas}
    return {"next_chunk": next_chunk, "extra": {i: control.extra(i) for i in replicas},
            "positions": views, "duplicate_dropped_groups": control.duplicate_groups()}


class _Waits:
    """What both feeds share: waiting on a receiver while restarts are handled."""

    rt: FeedRuntime
    on_wait: Callable[[], set[str]] = staticmethod(lambda: set())  # the trainer sets its own

    def on_broken(self, error: BaseException) -> set[str]:
        """A broken link: wait for the controller's verdict (the trainer sets its own)."""
        return self.rt.await_verdict(error)

    def start(self) -> None:
        self.links = self.rt.links()
        self._open()

    def _get(self, inbox: Callable[[], AsyncReceiver], reopen: Callable[[], None]) -> Rollout | None:
        """The next rollout of `inbox()`; after a reward restart `reopen()` makes new receivers.
        None: a restart cut the wait short (the caller decides what to redo)."""
        restarted: set[str] = set()

        def stop() -> bool:
            if self.rt.should_stop():
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

    def _until_all(self, key: str) -> None:
        """Until every trainer rank added itself to `key`, serving restarts meanwhile."""
        control = self.rt.control
        control.store.add(key, 1)
        while control.get_int(key) < self.world:
            if self.rt.should_stop():
                raise Stopped()
            if "reward" in self.on_wait():
                self._open()
            time.sleep(0.005)

    def agree(self, key: str, value) -> list:
        """Every trainer rank's `value` (JSON) for `key`, in rank order. Through the store, like
        `wait_for_peers`: a rank waiting here still serves restarts, which an all-gather would
        not let it do while a peer waits for rows from a restarted generator."""
        if self.world == 1:
            return [value]
        self.rt.control.set_json(f"{key}/{self.rank}", value)
        self._until_all(f"{key}/n")
        return [self.rt.control.get_json(f"{key}/{r}") for r in range(self.world)]

    def wait_for_peers(self, step: int) -> None:
        """Every trainer rank has its rows of `step` before any enters the step's collectives:
        a rank stuck in an all-reduce could not join the weight sync that new generators
        need before they can produce the rows its peer still waits for."""
        if self.world > 1 and self.needs_peers:
            self._until_all(f"collected/{step}")

    def close(self) -> None:
        pass


class RewardFeed(_Waits):
    needs_peers = True

    def __init__(self, cfg: FeedConfig, rt: FeedRuntime, rank: int, world: int):
        self.cfg, self.rt, self.rank, self.world, self.replicas = cfg, rt, rank, world, cfg.replicas
        self.sources = replicas_for_trainer(rank, self.replicas, world, cfg.prompts_per_step)
        # every rank a replica feeds takes the same extra chunks; the first of them counts them
        # (`extra/<replica>`, which the admission rule reads)
        self.counted = {i for i in range(self.replicas) if chunk_slices_for_trainers(
            i, self.replicas, world, cfg.prompts_per_step, cfg.group_size)[0][0] == rank}
        slices = {i: next((lo, hi) for j, lo, hi in chunk_slices_for_trainers(
            i, self.replicas, world, cfg.prompts_per_step, cfg.group_size) if j == rank) for i in self.sources}
        g = cfg.group_size
        self.intake = GroupIntake({i: (hi - lo) // g for i, (lo, hi) in slices.items()}, g,
                                  on_consumed=lambda i, n: rt.control.set_expected(i, rank, n),
                                  first_groups={i: lo // g for i, (lo, _) in slices.items()},
                                  on_duplicate=lambda i, n, groups: rt.control.add_duplicate_groups(groups))
        self.inboxes: dict[int, AsyncReceiver] = {}

    @property
    def next_chunk(self) -> dict[int, int]:
        """replica → the first chunk of it this rank has not consumed (its data position)."""
        return self.intake.next_chunk

    @property
    def metrics(self) -> dict:
        return {DUPLICATE_GROUPS_METRIC: self.rt.control.duplicate_groups()}

    def position(self) -> dict:
        return self.intake.position()

    def restore(self, state: dict) -> None:
        """From a checkpoint's state (merge_positions): this rank's own position where it was
        saved with as many trainer ranks (else the replicas' resume points, nothing ahead)."""
        positions = state.get("positions") or []
        self.intake.restore(positions[self.rank] if len(positions) == self.world
                            else {"next_chunk": state["next_chunk"]})

    def _open(self) -> None:
        self.links.drop("reward")
        me = self.rt.my_endpoint()
        # groups one message each (stream_groups): up to two steps' share of them land while the
        # trainer trains, so the reward rank's sends never wait for a collect
        depth = {i: 2 * self.intake.shares[i] if self.cfg.stream_groups else 1 for i in self.sources}
        self.inboxes = {i: AsyncReceiver(self.links.get(self.rt.endpoint("reward", self.rt.reward_rank_for(i)),
                                                        me, sending=False), TAG_TO_TRAINER_BASE + i,
                                         prefetch=depth[i])
                        for i in self.sources}

    def collect(self, step: int, version: int, on_groups: Callable[[list[Rollout], torch.Tensor], None] | None = None,
                on_idle: Callable[[], None] | None = None) -> Collected:
        """Step `step`'s rows. With `on_groups`, each piece of the share is handed to it (with its
        rows' staleness) as soon as it is taken, outside the "wait" spans, so the trainer can
        start on it (executors/train_step.py), and `on_idle()` is called when nothing has
        arrived, before the feed waits (the trainer runs what it holds instead of idling); the
        seconds returned are then those waited."""
        if on_groups is not None:
            return self._collect_streamed(step, version, on_groups, on_idle or (lambda: None))
        groups, t0 = [], time.time()
        with self.rt.timeline.span("wait", step=step):
            for i in self.sources:
                groups.extend(self._chunk_slice(i))
        return concat(groups), staleness_per_row(groups, version), time.time() - t0

    def _collect_streamed(self, step: int, version: int, on_groups, on_idle) -> Collected:
        groups, waited_s = [], 0.0
        for i in self.sources:
            share, mine = self.intake.shares[i], []
            while True:
                more = self.intake.take_upto(i, share - len(mine))
                if more:
                    mine.extend(more)
                    on_groups(more, staleness_per_row(more, version))
                if len(mine) == share:
                    break
                got = self._arrived(i)
                if got is None:
                    on_idle()
                    got = self._arrived(i)
                if got is None:
                    t0 = time.time()
                    with self.rt.timeline.span("wait", step=step):
                        got = self._get(lambda: self.inboxes[i], self._open)
                    waited_s += time.time() - t0
                if got is not None:
                    self.intake.add(got)
            groups.extend(mine)
        return concat(groups), staleness_per_row(groups, version), waited_s

    def _arrived(self, i: int) -> Rollout | None:
        """A rollout of replica i that has arrived already (never waits); a broken link is left
        to the waiting receive (`_get`), which handles it."""
        take = getattr(self.inboxes[i], "take", None)
        try:
            return take() if take is not None else None
        except LinkBroken:
            return None

    def collect_more(self, step: int, version: int) -> Collected:
        """One more chunk of every source replica within step `step`, counted as extra first (its
        replica may then start one chunk further: admission.py)."""
        for i in self.sources:
            if i in self.counted:
                self.rt.control.add_extra(i)
        return self.collect(step, version)

    def _chunk_slice(self, i: int) -> list[Rollout]:
        """This rank's slice of replica i's next chunk (intake.py keeps the order)."""
        while (groups := self.intake.take(i)) is None:
            got = self._get(lambda: self.inboxes[i], self._open)
            if got is not None:
                self.intake.add(got)
        return groups


class OwnChunks(_Waits):
    needs_peers = False  # no generator role to restart: nothing to wait for

    def __init__(self, cfg: FeedConfig, rt: FeedRuntime, chunk_cfg: ChunkConfig, rank: int, world: int,
                 model, tokenizer, prompts):
        self.cfg, self.rt, self.rank, self.world, self.replicas = cfg, rt, rank, world, world
        self.chunks = ChunkGenerator(chunk_cfg, model, tokenizer, prompts, rank, world, cfg.quantization)
        self.outbox = AsyncSender("actor-sender")
        self.inbox: AsyncReceiver | None = None
        self.next_chunk: dict[int, int] = {}  # this rank's next chunk (= step without resampling)
        self.admission = Admission(rt.control, rank, cfg.max_offpolicy_steps)

    def close(self) -> None:
        self.chunks.close()

    def position(self) -> dict:
        return {"next_chunk": dict(self.next_chunk), "trained_ahead": {}}

    def restore(self, state: dict) -> None:
        self.next_chunk = {int(i): c for i, c in state["next_chunk"].items()}

    def _open(self) -> None:
        """Links to and from this rank's reward rank, in the epochs of now."""
        self.links.drop("reward")
        me = self.rt.my_endpoint()
        reward = self.rt.endpoint("reward", self.rt.reward_rank_for(self.rank))
        self.outbox = AsyncSender("actor-sender")
        self.to_reward = self.links.get(me, reward, sending=True)
        self.inbox = AsyncReceiver(self.links.get(reward, me, sending=False), TAG_TO_TRAINER_BASE + self.rank)

    def collect(self, step: int, version: int) -> Collected:
        rt, t0 = self.rt, time.time()
        chunk = self.next_chunk.get(self.rank, step)
        if not self.admission.may_start(chunk, version):  # k = 0: chunk = version + extra, always
            raise RuntimeError(f"actor rank {self.rank}: chunk {chunk} may not start at version {version} "
                               f"(extra chunks {rt.control.extra(self.rank)}, executors/admission.py)")
        with rt.timeline.span("generate", step=step, version=version):
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
            with rt.timeline.span("wait", step=step):
                scored = self._get(lambda: self.inbox, self._open)
            send = self.inbox is not inbox  # new links: the new reward rank never saw it
        self.next_chunk[self.rank] = chunk + 1
        rt.control.set_stats("generator", self.rank,
                             {**self.chunks.stats(since=rt.timeline.t_start), **rt.timeline.totals()})
        return scored, staleness_per_row([scored], version), time.time() - t0

    def collect_more(self, step: int, version: int) -> Collected:
        """One more chunk, generated now with the weights being trained; counted as extra first."""
        self.rt.control.add_extra(self.rank)
        return self.collect(step, version)

    def weights_changed(self) -> None:
        self.chunks.engine.refresh_weights()  # the engine shares the trained module
