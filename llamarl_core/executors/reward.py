"""The reward role: score chunks as they arrive and forward them to the trainer rank(s).

    loop:
      receive a prompt group (or a whole chunk) from any generator replica (the header names it)
      decode completions → verifier pool (worker processes, wall-clock timeout per answer)
      once a chunk's groups are all scored: split rows by trainer data-parallel rank → send
      (tag = replica), in order, off-thread

The reward role holds no model; verifiers that hang or crash are killed and score 0.
"""
from __future__ import annotations

import time

import torch

from llamarl_core.executors.routing import chunk_slices_for_trainers
from llamarl_core.executors.setup import load_split, reward_name
from llamarl_core.models import ByteTokenizer, load_tokenizer
from llamarl_core.rewards import RewardPool
from llamarl_core.transport.channels import TAG_TO_REWARD, TAG_TO_TRAINER_BASE, AsyncReceiver, AsyncSender
from llamarl_core.wire.rollout import assemble
from llamarl_core.executors.context import Stopped, WorkerContext

POLL_S = 0.05


def _tokenizer(cfg):
    if cfg.model.checkpoint:
        return load_tokenizer(cfg.model.checkpoint)
    return ByteTokenizer()


class RewardExecutor:
    def __init__(self, ctx: WorkerContext):
        cfg = ctx.cfg
        self.ctx = ctx
        self.tokenizer = _tokenizer(cfg)
        self.references = [ex.reference for ex in load_split(cfg, "train")]
        r = cfg.resources.reward
        self.pool = RewardPool(reward_name(cfg), num_workers=r.workers, timeout_s=r.timeout_s)
        # Sync mode (k = 0) has no generator or trainer role: the colocated actor ranks are both.
        self.num_replicas = ctx.generator_replicas
        self.trainer_ranks = ctx.ranks("trainer") or ctx.ranks("actor")
        self.scored = 0
        self.partial: dict[tuple[int, int], list] = {}  # (replica, chunk) -> scored groups

    def run(self) -> None:
        ctx, a = self.ctx, self.ctx.cfg.algorithm
        # No chunk exists before version 0 is published; a receive posted now would wait
        # through the trainer's warm start and first eval and could time out.
        with ctx.timeline.span("wait"):
            while ctx.control.published_version() < 0:
                if ctx.should_stop():
                    raise Stopped()
                time.sleep(POLL_S)
        inbox, outbox = AsyncReceiver(None, TAG_TO_REWARD), AsyncSender("reward-sender")
        while True:
            with ctx.timeline.span("wait"):
                rollout = inbox.get(ctx.should_stop)
            if rollout is None:
                raise Stopped()
            with ctx.timeline.span("score", chunk=rollout.chunk, replica=rollout.replica):
                rollout.rewards = torch.tensor(self.score(rollout), dtype=torch.float32)
            self.scored += rollout.num_rows
            key = (rollout.replica, rollout.chunk)
            parts = self.partial.setdefault(key, [])
            parts.append(rollout)
            rollout = assemble(parts, a.group_size)
            if rollout is None:
                continue
            del self.partial[key]
            for j, lo, hi in chunk_slices_for_trainers(rollout.replica, self.num_replicas,
                                                       len(self.trainer_ranks), a.prompts_per_step,
                                                       a.group_size):
                outbox.send(rollout.rows(lo, hi), self.trainer_ranks[j], TAG_TO_TRAINER_BASE + rollout.replica)
            ctx.control.set_stats("reward", ctx.local_rank, {
                "scored": self.scored, "pool": dict(self.pool.stats), **ctx.timeline.totals()})

    def score(self, rollout) -> list[float]:
        texts, refs = [], []
        for r in range(rollout.num_rows):
            p, c = int(rollout.prompt_lens[r]), int(rollout.completion_lens[r])
            texts.append(self.tokenizer.decode(rollout.tokens[r, p:p + c].tolist()))
            refs.append(self.references[int(rollout.example_ids[r])])
        return self.pool.score(texts, refs)

    def close(self) -> None:
        self.pool.close()
