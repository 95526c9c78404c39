"""The generator role (async mode): sample with the newest weights held, never wait for
the trainer except to stay within `max_offpolicy_steps` (k).

    loop:
      ┌─ trainer published a version we do not hold? → receive it (weight sync), continue
      ├─ previous chunk not yet taken by the reward role? → poll (stay joinable for syncs)
      ├─ chunk n would be more than k versions stale when trained? → wait for weights
      └─ generate chunk n with version u, each prompt group isent to the reward rank the
         moment its last sample ends; between decode steps, newly published weights are
         received in place (rows record the versions they ran under) ; n += 1

Credit rule: the trainer consumes replica i's chunks in order, one per step, skipping
dropped ones, so chunk n is trained at step v = n - dropped_i. Starting it only when the
held version u ≥ v - k keeps every rollout within k versions of the policy that trains on it.
"""
from __future__ import annotations

import time

from llamarl_core.executors.chunks import ChunkGenerator
from llamarl_core.executors.setup import build_model, encode_prompts, load_split
from llamarl_core.transport.channels import TAG_TO_REWARD, AsyncSender
from llamarl_core.transport import checksums
from llamarl_core.executors.context import Stopped, WorkerContext
from llamarl_core.executors.weights import make_receiver

POLL_S = 0.02  # store polls per generator rank: 50/s, light even for hundreds of ranks

class GeneratorExecutor:
    def __init__(self, ctx: WorkerContext):
        cfg, g = ctx.cfg, ctx.cfg.resources.generator
        self.ctx = ctx
        self.model, self.tokenizer = build_model(cfg, dtype=g.dtype, device=ctx.device)
        self.model.requires_grad_(False)
        prompts = encode_prompts(cfg, load_split(cfg, "train"), self.tokenizer)
        replicas = len(ctx.ranks("generator"))
        self.chunks = ChunkGenerator(cfg, self.model, self.tokenizer, prompts, ctx.local_rank,
                                     replicas, g.quantization)
        self.params = dict(self.model.named_parameters())
        self.receiver = make_receiver(ctx, self.params)
        self.held = -1
        self.last_sync: dict = {}

    def _receive(self) -> None:
        with self.ctx.timeline.span("sync"):
            stats = self.receiver.receive(self.params, timeout_s=self.ctx.cfg.controller.step_timeout_s)
        self.chunks.engine.refresh_weights()
        self.held = stats.version
        self.ctx.control.set_held(self.ctx.global_rank, self.held)
        self.last_sync = {"seconds": stats.seconds, "gbps": stats.gbps, "version": stats.version}
        if self.ctx.cfg.run.weight_checksums:
            checksums.record(self.ctx.run_dir, "generator", self.ctx.local_rank, self.held, self.params)

    def run(self) -> None:
        ctx, k = self.ctx, self.ctx.cfg.algorithm.max_offpolicy_steps
        reward_rank = ctx.reward_rank_for(ctx.local_rank)
        sender = AsyncSender("rollout-sender")
        chunk = ctx.control.next_chunk(ctx.local_rank)  # > 0 on resume: the first untrained chunk
        t0 = time.time()
        while not ctx.should_stop():
            if ctx.control.published_version() > self.held:
                self._receive()
                continue
            if not self._may_generate(sender, chunk, k):
                with ctx.timeline.span("wait"):
                    self._wait_until_ready(sender, chunk, k)
                continue
            with ctx.timeline.span("generate", chunk=chunk, version=self.held):
                self.chunks.generate(chunk, self.held,
                                     on_group=lambda part: sender.send(part, reward_rank, TAG_TO_REWARD),
                                     between_steps=self._swap_if_published)
            chunk += 1
            self._publish_stats(t0)
        raise Stopped()

    def _swap_if_published(self) -> int:
        """Between decode steps: take newer weights in place (the trainer need not wait for
        this chunk to end); the engine tags each running sample with the version returned."""
        if not self.ctx.should_stop() and self.ctx.control.published_version() > self.held:
            self._receive()
        return self.held

    def _may_generate(self, sender: AsyncSender, chunk: int, k: int) -> bool:
        """Weights held, the last chunk was taken, and chunk n is trained at n - dropped ≤ held + k."""
        return self.held >= 0 and sender.idle() and chunk - self.ctx.control.dropped(self.ctx.local_rank) <= self.held + k

    def _wait_until_ready(self, sender: AsyncSender, chunk: int, k: int) -> None:
        """Until `_may_generate`, or new weights arrive, or the run ends."""
        control = self.ctx.control
        while not self.ctx.should_stop() and control.published_version() <= self.held:
            if self._may_generate(sender, chunk, k):
                return
            time.sleep(POLL_S)

    def _publish_stats(self, t0: float) -> None:
        self.ctx.control.set_stats("generator", self.ctx.local_rank, {
            **self.chunks.stats(since=t0), "held_version": self.held, "sync": self.last_sync,
            **self.ctx.timeline.totals()})

    def close(self) -> None:
        self.receiver.close()
