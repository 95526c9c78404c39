"""The reward role: score chunks as they arrive and forward them to the trainer rank(s).

    loop:
      receive a prompt group (or a whole chunk) from any generator replica (the header names it;
      woken by its arrival, a step's groups queued ahead: transport/channels.py)
      decode each unscored row's last assistant turn → verifier pool (worker processes, wall-clock
      timeout per answer); rows an environment scored keep their reward
      once a chunk's groups are all scored: split rows by trainer data-parallel rank → send
      (tag = replica), in order, off-thread; or, when the trainer starts micro-batches on groups
      as they arrive (resources.trainer.stream_groups), each group as soon as it is scored

Each group is received straight into its rows of its chunk's packed buffer
(wire/assembly.py), scored there in place, and the trainer ranks' rows are views of that
buffer: the reward rank copies no rollout (no concatenation, no re-pack).

The reward role holds no model; verifiers that hang or crash are killed and score 0.
"""
from __future__ import annotations

import dataclasses
import math
import time

import torch

from llamarl_core.config.schema import DataConfig, ModelConfig, RewardResources, RewardSettings
from llamarl_core.executors import rejoin
from llamarl_core.executors.context import RoleRuntime, Stopped
from llamarl_core.executors.routing import chunk_slices_for_trainers
from llamarl_core.executors.setup import load_split, reward_terms
from llamarl_core.models.build import tokenizer_of
from llamarl_core.observe.learning_signal import last_line
from llamarl_core.rewards.weighted import WeightedRewards
from llamarl_core.transport.channels import (TAG_TO_REWARD, TAG_TO_TRAINER_BASE, Arrivals, AsyncReceiver,
                                             AsyncSender, LinkBroken, get_any)
from llamarl_core.wire.assembly import ChunkAssembly

POLL_S = 0.05


class RewardExecutor:
    def __init__(self, ctx: RoleRuntime, model: ModelConfig, data: DataConfig, resources: RewardResources,
                 prompts_per_step: int, group_size: int, forward_groups: bool = False,
                 max_abs: float = RewardSettings.max_abs):
        """Its sections are listed in pipeline.py. `forward_groups`: send each group on as soon as
        it is scored, not each trainer rank's slice of a chunk once the chunk is whole; `max_abs`:
        reward.max_abs (a larger or non-numeric reward is an error for its sample)."""
        self.ctx, self.forward_groups = ctx, forward_groups
        self.prompts_per_step, self.group_size = prompts_per_step, group_size
        self.tokenizer = tokenizer_of(model)
        r = resources
        # data.rewards' terms (per-term metrics: reported), or data.reward alone (weight 1)
        self.pool = WeightedRewards(reward_terms(data), num_workers=r.workers, timeout_s=r.timeout_s,
                                    max_abs=max_abs, on_progress=ctx.progress)
        self.report_terms = bool(data.rewards)
        # What a verifier compares against: the reference, or for a custom reward the whole row.
        examples = load_split(data, "train")
        self.references = [ex.reference for ex in examples]
        self.rows = [ex.as_dict() for ex in examples] if self.pool.custom else None
        self.reported: set[str] = set()  # the pool's first error / timeout, once each in this log
        # Sync mode (k = 0) has no generator or trainer role: the colocated actor ranks are both.
        self.num_replicas = ctx.generator_replicas
        self.source_role = "generator" if ctx.ranks("generator") else "actor"
        self.trainer_role = "trainer" if ctx.ranks("trainer") else "actor"
        self.trainer_ranks = ctx.ranks(self.trainer_role)
        # the replicas this rank scores (replica i → reward rank i mod R)
        self.sources = [i for i in range(self.num_replicas) if ctx.reward_rank_for(i) == ctx.local_rank]
        self.scored = 0
        self.assembly = ChunkAssembly(group_size)  # chunks whose groups are arriving

    def run(self) -> None:
        ctx = self.ctx
        # No chunk exists before version 0 is published; a receive posted now would wait
        # through the trainer's warm start and first eval and could time out.
        with ctx.timeline.span("wait"):
            while ctx.control.published_version() < 0:
                if ctx.should_stop():
                    raise Stopped()
                time.sleep(POLL_S)
        self.links, self.watch = rejoin.links(ctx), rejoin.watch(ctx, [self.source_role])
        inbox, outbox = self._open_inbox(), AsyncSender("reward-sender")
        while True:
            restarted: set[str] = set()

            def stop() -> bool:
                restarted.update(self.watch.poll())
                return bool(restarted) or ctx.should_stop()
            try:
                with ctx.timeline.span("wait"):
                    rollout = get_any(inbox, stop)
                if rollout is None and not restarted:
                    raise Stopped()
                if rollout is not None:
                    self._take(rollout, outbox)
            except LinkBroken as e:  # a generator (or trainer) died: the controller decides
                restarted = rejoin.await_verdict(ctx, self.watch, e)
            if restarted:  # the generator role was restarted: its chunks are generated again
                inbox = self._open_inbox()

    def _open_inbox(self) -> list[AsyncReceiver]:
        """One receiver per replica this rank scores, on links of the current epochs; what
        was partly received from the old ones is dropped (it will be generated again)."""
        self.links.drop(self.source_role)
        self.assembly = ChunkAssembly(self.group_size)
        me, tp = rejoin.my_endpoint(self.ctx), self.ctx.generator_tp
        # Event-driven, a step deep: every group of a replica's step can land while this rank
        # scores, so no generator waits for it to take the next one.
        arrivals, depth = Arrivals(), 2 * -(-self.prompts_per_step // max(1, self.num_replicas))
        return [AsyncReceiver(self.links.get(rejoin.endpoint(self.ctx, self.source_role, i * tp), me, sending=False),
                              TAG_TO_REWARD, prefetch=depth, arrivals=arrivals, buffers=self.assembly.buffers)
                for i in self.sources]

    def _take(self, rollout, outbox: AsyncSender) -> None:
        """Score a prompt group; once its chunk is whole, send each trainer rank its rows."""
        ctx = self.ctx
        with ctx.timeline.span("score", chunk=rollout.chunk, replica=rollout.replica):
            # in place: a received rollout's fields are views of its packed tensors (wire/rollout.py)
            rollout.rewards.copy_(torch.tensor(self.score(rollout), dtype=torch.float32))
        self.scored += rollout.num_rows
        part = rollout
        rollout = self.assembly.add(rollout)  # views of the rows the groups were received into
        if rollout is not None:  # before its rows go on: a synchronous trainer's line counts this chunk
            self._set_stats()
        if self.forward_groups and part.chunk_groups:
            self._forward(part, outbox)
        elif rollout is not None:
            for j, lo, hi in self._slices(rollout.replica):
                self._send(rollout.rows(lo, hi), j, outbox)

    def _set_stats(self) -> None:
        pool = self.pool
        stats = {"scored": self.scored, "pool": pool.stats, **self.ctx.timeline.totals(),
                 "first_error": last_line(pool.first_error)}  # for the trainer's words (observe/learning_signal.py)
        if self.report_terms:  # each term's unweighted sum and count so far: reward/<name>_mean
            stats["terms"] = {n: [pool.term_sums[n], pool.term_counts[n]] for n in pool.names}
        self.ctx.control.set_stats("reward", self.ctx.local_rank, stats)

    def _slices(self, replica: int) -> list[tuple[int, int, int]]:
        """(trainer rank, first row, end row) of each trainer rank's slice of `replica`'s chunks."""
        return chunk_slices_for_trainers(replica, self.num_replicas, len(self.trainer_ranks), self.prompts_per_step,
                                         self.group_size)

    def _send(self, rows, trainer_rank: int, outbox: AsyncSender) -> None:
        link = self.links.get(rejoin.my_endpoint(self.ctx), rejoin.endpoint(self.ctx, self.trainer_role, trainer_rank),
                              sending=True)
        outbox.send(rows, link, TAG_TO_TRAINER_BASE + rows.replica)

    def _forward(self, part, outbox: AsyncSender) -> None:
        """A scored part of a chunk (whole groups) to the trainer rank(s) whose slice holds it,
        as it is: a group of the chunk (its `group` and `chunk_groups` tell the intake where)."""
        g, first = self.group_size, part.group * self.group_size
        for j, lo, hi in self._slices(part.replica):
            a, b = max(lo, first), min(hi, first + part.num_rows)
            if a < b:
                self._send(dataclasses.replace(part.rows(a - first, b - first), group=a // g,
                                               chunk_groups=part.chunk_groups), j, outbox)

    def score(self, rollout) -> list[float]:
        """Every row's reward: a row the generator scored already (its environment returned
        rewards, envs/protocol.py) keeps it; the others (NaN) get `data.reward` (or the weighted
        sum of `data.rewards`) of the last assistant turn's text, as the model wrote it."""
        rewards = rollout.rewards.tolist()
        todo = [r for r in range(rollout.num_rows) if math.isnan(rewards[r])]
        texts, ids = [], []
        for r in todo:
            start, end = rollout.last_turn(r)
            texts.append(self.tokenizer.decode(rollout.tokens[r, start:end].tolist()))
            ids.append(int(rollout.example_ids[r]))
        rows = [self.rows[i] for i in ids] if self.rows is not None else None
        scores = self.pool.score(texts, [self.references[i] for i in ids], rows) if todo else []
        for r, score in zip(todo, scores):
            rewards[r] = score
        self._report_first_failures()
        return rewards

    def _report_first_failures(self) -> None:
        """The first error (a custom reward's traceback) and the first timeout go to this
        rank's log (logs/reward_<rank>.log) once; later ones are only counted
        (reward/errors, reward/timeouts in metrics.jsonl)."""
        for kind, text in (("error", self.pool.first_error), ("timeout", self.pool.first_timeout)):
            if text and kind not in self.reported:
                self.reported.add(kind)
                print(f"reward: first {kind} of {self.pool.name} (the sample scored 0; later ones are "
                      f"counted in reward/{kind}s):\n{text.rstrip()}", flush=True)

    def close(self) -> None:
        self.pool.close()
