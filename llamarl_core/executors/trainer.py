"""The trainer role: AIPO steps on rollouts as they come, weights out after every step.

    warm start (optional SFT) → held-out eval → publish v0 weights
    for step v = 0 .. max_steps-1:
        collect this rank's rows of step v from every generator replica that feeds it
            (a chunk generated with version u < v - k is dropped and counted; wait for the next)
        AIPO: loss = -stopgrad(min(π/μ, ρ)) · A · log π   (data parallel over trainer ranks)
        optimizer step → version v+1 → weight sync to generators (not after the last step)
        eval / checkpoint when due; one metrics.jsonl line
    final eval, final checkpoint, run/state = done

The synchronous baseline (`ActorExecutor`) reuses all of it and only changes `collect`
(generate its own chunk, have it scored, train on it) and `sync` (nothing to send).
"""
from __future__ import annotations

import json
import os
import random
import time

import torch
import torch.distributed as dist

from llamarl_core.executors.heldout import heldout_summary
from llamarl_core.executors.learner import Learner, WarmStart
from llamarl_core.executors.metrics_log import MetricsLog
from llamarl_core.wire.rollout import Rollout, concat, staleness_per_row
from llamarl_core.executors.routing import replicas_for_trainer
from llamarl_core.executors.setup import build_model, encode_prompts, load_split, reward_name, sft_sequences
from llamarl_core.models import save_pretrained
from llamarl_core.rewards import get_reward
from llamarl_core.transport import checksums
from llamarl_core.transport.channels import TAG_TO_TRAINER_BASE, AsyncReceiver
from llamarl_core.executors.context import Stopped, WorkerContext
from llamarl_core.transport.parallel import full_state, unwrap
from llamarl_core.executors.trainer_model import build_trainer_model
from llamarl_core.executors.weights import make_sender


class TrainerExecutor:
    def __init__(self, ctx: WorkerContext):
        cfg, t = ctx.cfg, ctx.cfg.resources.trainer
        self.ctx, self.cfg = ctx, cfg
        self.model, self.raw, self.tokenizer = build_trainer_model(ctx)
        self.group = ctx.groups.get(ctx.trainer_role)
        self.rank, self.world = ctx.local_rank, len(ctx.ranks(ctx.trainer_role))
        ref = None
        if cfg.algorithm.kl_coef > 0:
            ref = build_model(cfg, dtype=t.dtype)[0].requires_grad_(False).to(ctx.device)
        self.learner = Learner(self.model, cfg, ref)
        self.train_prompts = encode_prompts(cfg, load_split(cfg, "train"), self.tokenizer)
        self.eval_examples = load_split(cfg, "test")
        self.reward_fn = get_reward(reward_name(cfg))
        self.version = 0
        self.replicas = len(ctx.ranks(ctx.generator_role))
        self.sender = None
        if not ctx.is_sync and self.rank == 0:
            self.sender = make_sender(ctx, dict(self.raw.named_parameters()))
        sizes = {"generator": self.replicas, "reward": len(ctx.ranks("reward"))}
        self.log = MetricsLog(ctx.run_dir, ctx.control, sizes) if self.rank == 0 else None
        self.last_sync: dict = {}
        self.accuracy: dict[int, float] = {}
        self.inboxes = self._inboxes()

    def _inboxes(self) -> dict[int, AsyncReceiver]:
        """One receiver per generator replica that feeds this rank (via its reward rank)."""
        p = self.cfg.algorithm.prompts_per_step
        return {i: AsyncReceiver(self.ctx.reward_rank_for(i), TAG_TO_TRAINER_BASE + i)
                for i in replicas_for_trainer(self.rank, self.replicas, self.world, p)}

    # ---- phases -------------------------------------------------------------------------
    def run(self) -> None:
        cfg, ctx = self.cfg, self.ctx
        self.warm_start()
        self.evaluate()
        self.sync()
        t_rl = time.time()
        for step in range(cfg.run.max_steps):
            t0 = time.time()
            batch, staleness, waited_s = self.collect(step)
            with ctx.timeline.span("train", step=step):
                metrics = self.learner.rl_step(batch, staleness)
            self.version += 1
            last = step == cfg.run.max_steps - 1 or self._out_of_time(t_rl)
            if not last:
                self.sync()
            due = cfg.run.eval_every_steps and (step + 1) % cfg.run.eval_every_steps == 0
            if due or last:
                self.evaluate()
            if cfg.run.checkpoint_every_steps and (step + 1) % cfg.run.checkpoint_every_steps == 0:
                self.checkpoint(f"step_{step + 1}")
            self._log(step, metrics, batch, waited_s, time.time() - t0)
            if last:
                break
        self.checkpoint("final")
        self._write_summary(time.time() - t_rl)
        if self.rank == 0:
            ctx.control.mark_done()

    def warm_start(self) -> None:
        w = self.cfg.warmstart
        if w.steps == 0:
            return
        ws = WarmStart(self.model, self.cfg, self.tokenizer.pad_id)
        seqs = sft_sequences(self.cfg, self.train_prompts, self.tokenizer)
        # Every rank draws the same global batch and trains on its slice, so the warm start
        # (and the accuracy RL starts from) is the same however many trainer ranks there are.
        rng = random.Random(f"warmstart:{self.cfg.run.seed}")
        with self.ctx.timeline.span("warmstart", steps=w.steps):
            for i in range(w.steps):
                batch = rng.sample(seqs, min(w.batch_size, len(seqs)))
                loss = ws.step(batch[self.rank::self.world])
                if self.rank == 0 and (i % 20 == 0 or i == w.steps - 1):
                    print(f"warmstart step {i + 1}/{w.steps} loss {loss:.4f}", flush=True)

    def collect(self, step: int) -> tuple[Rollout, torch.Tensor, float]:
        """This rank's rows for step `step` from every replica that feeds it."""
        k, chunks, t0 = self.cfg.algorithm.max_offpolicy_steps, [], time.time()
        with self.ctx.timeline.span("wait", step=step):
            for i, inbox in self.inboxes.items():
                while True:
                    r = inbox.get(self.ctx.should_stop)
                    if r is None:
                        raise Stopped()
                    if r.policy_version >= self.version - k:
                        chunks.append(r)
                        break
                    if i == min(self.inboxes):  # the first trainer rank a replica feeds counts it
                        self.ctx.control.add_dropped(i)
        return concat(chunks), staleness_per_row(chunks, self.version), time.time() - t0

    def sync(self) -> None:
        """Push this version to the generators (trainer rank 0 is the source)."""
        state = full_state(self.model, self.cfg.resources.trainer.strategy)
        if self.sender is None:
            return
        with self.ctx.timeline.span("sync", version=self.version):
            self.ctx.control.publish_version(self.version)
            stats = self.sender.send(state, self.version, timeout_s=self.cfg.controller.step_timeout_s)
        if self.cfg.run.weight_checksums:
            checksums.record(self.ctx.run_dir, "trainer", self.rank, self.version, state)
        self.last_sync = {"sync/seconds": round(stats.seconds, 5), "sync/gbps": round(stats.gbps, 4),
                          "sync/bytes": stats.bytes, "sync/transport": stats.transport}

    def evaluate(self) -> None:
        model = self._full_model()  # collective under fsdp2: every trainer rank calls it
        if model is None or not self.eval_examples:
            return
        with self.ctx.timeline.span("eval", version=self.version):
            summary = heldout_summary(model, self.tokenizer, self.cfg, self.eval_examples, self.reward_fn)
        self.accuracy[self.version] = float(summary["accuracy"])
        print(f"held-out accuracy at version {self.version}: {summary['accuracy']:.3f} "
              f"({summary['n_examples']} examples)", flush=True)

    def checkpoint(self, name: str) -> None:
        model = self._full_model()
        if model is None:
            return
        with self.ctx.timeline.span("checkpoint"):
            save_pretrained(model, self.tokenizer, os.path.join(self.ctx.run_dir, "checkpoints", name))

    def _full_model(self):
        """On rank 0, a plain module holding the full weights (None elsewhere).

        DDP replicas already hold them; FSDP2 shards them, so they are gathered (a collective
        over the trainer ranks) into a fresh unsharded copy.
        """
        sharded = self.cfg.resources.trainer.strategy == "fsdp2" and self.world > 1
        state = full_state(self.model, "fsdp2") if sharded else None
        if self.rank != 0:
            return None
        if not sharded:
            return unwrap(self.model)
        model = build_model(self.cfg, dtype=self.cfg.resources.trainer.dtype)[0].to(self.ctx.device)
        model.load_state_dict(state, strict=False)
        return model

    # ---- bookkeeping --------------------------------------------------------------------
    def _out_of_time(self, t_rl: float) -> bool:
        limit = self.cfg.run.max_time_s
        flag = torch.tensor([1.0 if limit and time.time() - t_rl > limit else 0.0])
        if self.group is not None and self.world > 1:
            dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.group)
        return bool(flag.item())

    def _dropped_total(self) -> int:
        return sum(self.ctx.control.dropped(i) for i in range(self.replicas))

    def _log(self, step: int, metrics: dict, batch: Rollout, waited_s: float, step_s: float) -> None:
        if self.log is None:
            return
        ctx = self.ctx
        line = {"step": step + 1, "policy_version": self.version,
                "reward_mean": round(metrics.pop("reward_mean"), 4),
                **{f"trainer/{k}": round(v, 5) for k, v in metrics.items()},
                "batch/min_policy_version": batch.policy_version,
                "dropped_chunks": self._dropped_total(),
                "step_s": round(step_s, 4), "trainer/wait_s": round(waited_s, 4),
                **{f"trainer/{k}": v for k, v in ctx.timeline.totals().items() if k != "by_state_s"},
                **self.last_sync}
        if self.version in self.accuracy:
            line["eval/accuracy"] = self.accuracy[self.version]
        line = self.log.write(line)
        print(json.dumps(line), flush=True)

    def _write_summary(self, rl_wall_s: float) -> None:
        if self.rank != 0:
            return
        versions = sorted(self.accuracy)
        summary = {"recipe": self.cfg.recipe, "mode": "sync" if self.ctx.is_sync else "async",
                   "steps": self.version, "rl_wall_s": round(rl_wall_s, 2),
                   "accuracy_before": self.accuracy.get(versions[0]) if versions else None,
                   "accuracy_after": self.accuracy.get(versions[-1]) if versions else None,
                   "accuracy_by_version": self.accuracy,
                   "dropped_chunks": self._dropped_total()}
        with open(os.path.join(self.ctx.run_dir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)

    def close(self) -> None:
        if self.sender is not None:
            self.sender.close()
        if self.log is not None:
            self.log.close()
