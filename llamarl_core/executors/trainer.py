"""The trainer loop: AIPO steps on rollouts as they come, a new version out after every step.

    warm start (optional SFT) → checkpoints/warmstart → held-out eval → publish v0 → feed.start()
    for step v = 0 .. max_steps-1:
        feed.collect: this rank's rows of step v
        AIPO: loss = -stopgrad(min(π/μ, ρ)) · A · log π   (data parallel over trainer ranks)
        optimizer step → version v+1 → publisher.publish (not after the last step)
        eval / checkpoint when due; one metrics.jsonl line
    final eval, final checkpoint, run/state = done

One loop for both modes; what differs is handed in by the pipeline (executors/pipeline.py):
how a step's rows are collected (executors/feeds.py) and how a version is published
(executors/publishers.py).
"""
from __future__ import annotations

import json
import os
import time
from typing import Callable

import torch
import torch.distributed as dist

from llamarl_core.checkpoint import checkpoints
from llamarl_core.config.schema import (AlgorithmConfig, DataConfig, GenerationConfig, LoggingConfig, ModelConfig,
                                        RunConfig, TrainerResources, WarmStartConfig)
from llamarl_core.config.streaming import is_sync
from llamarl_core.eval.heldout import HeldoutConfig, heldout_episodes, heldout_eval, write_samples
from llamarl_core.eval.metrics import EPISODE_SUMMARY_KEYS
from llamarl_core.eval.sharded_eval import LockstepGreedy
from llamarl_core.executors import rejoin
from llamarl_core.executors.context import RoleRuntime
from llamarl_core.executors.feeds import merge_positions
from llamarl_core.executors.learner import Learner, LearnerConfig
from llamarl_core.executors.ports import RolloutFeed, WeightPublisher
from llamarl_core.executors.resample import DynamicSampling
from llamarl_core.executors.rl_step import rl_step
from llamarl_core.executors.setup import encode_prompts, load_split, reward_name
from llamarl_core.executors.trainer_model import build_reference_model, build_trainer_model
from llamarl_core.generation.params import stop_ids
from llamarl_core.models import save_model_files, save_streamed
from llamarl_core.models.dtypes import TORCH_DTYPES
from llamarl_core.models.export import export_dtype
from llamarl_core.models.lora import is_adapter, lora_scales, merge_adapters
from llamarl_core.observe.end_reason import EndReason, trainer_end
from llamarl_core.observe.learning_signal import RewardsAllErrored
from llamarl_core.observe.metrics_log import MetricsLog, TrainedExamplesLog, TrainedSamplesLog
from llamarl_core.observe.progress import StoreProgress, publish_accuracy
from llamarl_core.observe.rollout_stats import rollout_stats
from llamarl_core.rewards import get_reward
from llamarl_core.sft.warmstart import CHECKPOINT_NAME as WARMSTART_CHECKPOINT, warmstart_sequences, warmstart_steps
from llamarl_core.transport.membership import role_epoch
from llamarl_core.transport.parallel import copy_weights, iter_full_tensors, unwrap
from llamarl_core.transport.sharded_load import load_sharded
from llamarl_core.wire.rollout import Rollout


class TrainerExecutor:
    def __init__(self, ctx: RoleRuntime, model: ModelConfig, resources: TrainerResources, algorithm: AlgorithmConfig,
                 data: DataConfig, generation: GenerationConfig, warmstart: WarmStartConfig, run: RunConfig,
                 logging: LoggingConfig, learner_cfg: LearnerConfig, heldout_cfg: HeldoutConfig,
                 make_feed: Callable, make_publisher: Callable, *, recipe: str, export_dtype: str = "auto",
                 episodes: bool = False):
        """Its own config sections (listed in pipeline.py); `make_feed` / `make_publisher`: how a
        step's rows come and a version goes, given the built trainer; `episodes`: rows are
        multi-turn episodes (env.enabled: the env/* metrics)."""
        self.ctx, self.heldout_cfg, self.episodes = ctx, heldout_cfg, episodes
        self.model_cfg, self.resources, self.algorithm, self.data, self.generation = (model, resources, algorithm,
                                                                                     data, generation)
        self.warmstart_cfg, self.run_cfg, self.recipe, self.export_dtype = warmstart, run, recipe, export_dtype
        self.model, self.raw, self.tokenizer = build_trainer_model(ctx, model, resources, run.seed)
        self.group = ctx.groups.get(ctx.role)
        self.rank, self.world = ctx.local_rank, len(ctx.ranks(ctx.role))
        # The KL reference is the policy RL starts from (refreshed after the warm start), sharded
        # like the trainer: trainer_model.py. With LoRA none is built: the learner runs the
        # trained module with its adapters off (the base).
        self.ref = (build_reference_model(self.model, ctx.device, TORCH_DTYPES[resources.dtype])
                    if algorithm.kl_coef > 0 and not model.lora.enabled else None)
        eos_ids = stop_ids(self.tokenizer)  # what the engine stops on: a completion ending there is not cut
        self.learner = Learner(self.model, learner_cfg, self.ref, data_parallel=self.world > 1, eos_ids=eos_ids)
        self.train_prompts = encode_prompts(data, generation, load_split(data, "train"), self.tokenizer)
        self.eval_examples = load_split(data, "test")
        self.data_skipped = {split: getattr(getattr(x, "report", None), "num_skipped", 0)  # on_error=skip
                             for split, x in (("train", self.train_prompts.examples), ("test", self.eval_examples))}
        self.reward_fn = get_reward(reward_name(data))
        self.version = 0
        # restarts of the roles this one talks to (executors/rejoin.py); trainers never restart
        self.restartable = [r for r in ("generator", "reward") if ctx.ranks(r)]
        self.watch = rejoin.watch(ctx, self.restartable)
        self.feed: RolloutFeed = make_feed(self)                  # executors/ports.py
        self.publisher: WeightPublisher = make_publisher(self)
        self.feed.on_wait, self.feed.on_broken = self._on_wait, self._on_broken
        # How a step's rows are collected: the feed itself, or rounds of it (executors/resample.py).
        self.sampler = (DynamicSampling(self.feed, algorithm, generation.max_new_tokens)
                        if algorithm.dynamic_sampling else self.feed)
        publisher_watch = rejoin.watch(ctx, ["generator"])
        self.publisher.on_broken = lambda e: rejoin.await_verdict(ctx, publisher_watch, e)
        sizes = {"generator": self.feed.replicas, "reward": len(ctx.ranks("reward"))}
        first_step = checkpoints.read_state(run.resume)["step"] + 1 if run.resume else 1
        self.log = (MetricsLog(ctx.run_dir, ctx.control, sizes, logging, first_step)
                    if self.rank == 0 else None)
        self.examples_log = TrainedExamplesLog(ctx.run_dir) if self.rank == 0 else None
        n_samples = logging.trained_samples_per_step
        self.samples_log = (TrainedSamplesLog(ctx.run_dir, n_samples, self.tokenizer, episodes=episodes)
                            if self.rank == 0 and n_samples else None)
        self.last_sync: dict = {}
        self.accuracy: dict[int, float] = {}
        self.eval_episode_stats: dict[int, dict] = {}  # version -> eval/turns_mean, eval/tool_calls_mean, ...
        # the environment's workers of every held-out eval (env.enabled), opened once, closed at exit
        self.eval_episodes = (heldout_episodes(heldout_cfg, self.tokenizer)
                              if self.eval_examples and self.rank == 0 else None)

    # ---- phases -------------------------------------------------------------------------
    def run(self) -> None:
        run, ctx = self.run_cfg, self.ctx
        start = self.restore() if run.resume else 0
        if not run.resume:
            self.warm_start()
            self.evaluate()
        self.sync()
        self.feed.start()
        t_rl = time.time()
        if self.log is not None:
            self.log.rl_start = t_rl
        for step in range(start, run.max_steps):
            t0 = time.time()
            ctx.progress()
            done = rl_step(self.feed, self.learner, self.publisher, step, self.version,
                           lambda: step == run.max_steps - 1 or self._out_of_time(t_rl),
                           sampler=self.sampler, span=ctx.timeline.span,
                           stream_groups=self.learner.cfg.stream_groups)
            batch, metrics, waited_s, self.version, last = (done.batch, done.metrics, done.waited_s,
                                                            done.version, done.last)
            if done.sync is not None:
                self.last_sync = done.sync
            due = run.eval_every_steps and (step + 1) % run.eval_every_steps == 0
            if due or last:
                self.evaluate()
            with ctx.timeline.span("log", step=step):  # bookkeeping: busy, not waiting on a role
                self._log_examples(step, batch)
                self._log(step, metrics, batch, waited_s, time.time() - t0)
            if run.checkpoint_every_steps and (step + 1) % run.checkpoint_every_steps == 0:
                self.save_checkpoint(step + 1)
            if last:
                break
        self.export_final()
        self._write_summary(time.time() - t_rl, self._end_reason())
        if self.log is not None and self.log.signal.all_errored():  # exit 1, not a run that "worked"
            raise RewardsAllErrored(self.log.signal.failure())
        if self.rank == 0:
            ctx.control.mark_done()

    def warm_start(self) -> None:
        """Supervised warm start, saved as checkpoints/warmstart (sft/warmstart.py)."""
        w = self.warmstart_cfg
        if w.steps == 0:
            return
        with self.ctx.timeline.span("warmstart", steps=w.steps):
            seqs, skipped = warmstart_sequences(w, self.data, self.generation, self.train_prompts, self.tokenizer)
            if w.data:  # summary.json: data_skipped_lines.warmstart
                self.data_skipped["warmstart"] = skipped
            warmstart_steps(self.model, w, self.run_cfg.seed, seqs, self.tokenizer.pad_id, self.rank,
                            self.world, log=lambda m: print(m, flush=True),
                            on_step=self._progress("warmstart"), adam=self.learner.cfg)
        # KL to where RL starts, not to the weights before the warm start (with LoRA: to the base)
        if self.ref is not None:
            copy_weights(self.ref, self.model)
        self.checkpoint(WARMSTART_CHECKPOINT)
        if self.rank == 0:
            path = os.path.join(self.ctx.run_dir, "checkpoints", WARMSTART_CHECKPOINT)
            print(f"warm start saved to {path} (RL from it: model.checkpoint={path} warmstart.steps=0)",
                  flush=True)

    def sync(self) -> None:
        """Hand version `self.version` to whoever generates next."""
        self.last_sync = self.publisher.publish(self.version)

    def _on_wait(self) -> set[str]:
        """Called while waiting for rows: new generators get the current weights first."""
        return self._rejoined(self.watch.poll())

    def _on_broken(self, error: BaseException) -> set[str]:
        return self._rejoined(rejoin.await_verdict(self.ctx, self.watch, error))

    def _rejoined(self, restarted: set[str]) -> set[str]:
        if "generator" in restarted:
            self.last_sync = self.publisher.rejoin(self.version) or self.last_sync
        return restarted

    def evaluate(self) -> None:
        sharded = self._sharded()
        if not self.eval_examples or (self.rank != 0 and not sharded):  # DDP replicas hold the same weights
            return
        # FSDP2: every rank decodes through its shards (eval/sharded_eval.py), no rank gathers the model.
        engine = (LockstepGreedy(self.model, self.tokenizer, self.group, self.ctx.device,
                                 TORCH_DTYPES[self.resources.dtype]) if sharded else None)
        with self.ctx.timeline.span("eval", version=self.version):
            summary, samples = heldout_eval(None if sharded else unwrap(self.model), self.tokenizer, self.heldout_cfg,
                                            self.eval_examples, self.reward_fn, self._progress("eval"), engine=engine,
                                            episodes=self.eval_episodes)
        if self.rank != 0:
            return
        self.accuracy[self.version] = float(summary["accuracy"])
        if self.eval_episodes is not None:
            self.eval_episode_stats[self.version] = {f"eval/{k}": summary[k] for k in EPISODE_SUMMARY_KEYS}
        publish_accuracy(self.ctx.control, self.accuracy)  # the panel's start → latest
        print(f"held-out accuracy at version {self.version}: {summary['accuracy']:.3f} "
              f"({summary['n_examples']} examples)", flush=True)
        write_samples(self.ctx.run_dir, self.version, self.version, time.time() - self.log.t_start,
                      self.accuracy[self.version], samples)

    def _progress(self, phase: str) -> Callable[[int, int], None]:
        """Progress of a long phase: liveness for the heartbeat, a bar for the live view."""
        bar = StoreProgress(self.ctx.control, phase)

        def report(done: int, total: int) -> None:
            self.ctx.progress()
            bar(done, total)
        return report

    def _sharded(self) -> bool:
        """Whether the weights are FSDP2 shards. Read from the model, not the strategy:
        fsdp2 with resources.trainer.fsdp=1 is built as DDP replicas (transport/parallel.py)."""
        return hasattr(self.model, "reshard")

    def checkpoint(self, name: str, dtype: torch.dtype | None = None) -> None:
        """An HF checkpoint, weights in `dtype` (default: as trained); a LoRA model's written
        merged (W + s·B@A, no adapter names: models/lora.py `merge_adapters`). Under FSDP2 the
        parameters are gathered one tensor at a time into the file being written, so no rank
        ever holds the full model (70B/405B)."""
        path = os.path.join(self.ctx.run_dir, "checkpoints", name)
        dtype = dtype or TORCH_DTYPES[self.resources.dtype]
        raw = unwrap(self.model)
        shapes = {n: tuple(p.shape) for n, p in raw.named_parameters() if not is_adapter(n)}
        if self._sharded():
            tensors = iter_full_tensors(self.model, keep=self.rank == 0)
            if self.rank != 0:
                for _ in tensors:  # take part in every gather
                    pass
                return
        elif self.rank != 0:  # DDP replicas hold the same weights
            return
        else:
            tensors = ((n, p.detach()) for n, p in raw.named_parameters())
        with self.ctx.timeline.span("checkpoint"):
            save_streamed(merge_adapters(tensors, lora_scales(raw)), shapes, dtype, raw.args, self.tokenizer, path)

    def export_final(self) -> None:
        """checkpoints/final in export.dtype (auto: the dtype of the checkpoint the run started from)."""
        self.checkpoint("final", export_dtype(self.export_dtype, self.model_cfg.checkpoint))

    def save_checkpoint(self, step: int) -> None:
        """checkpoints/step_<step>/ (see checkpoint/checkpoints.py); collective over the trainer ranks."""
        # the data position: next_chunk, extra, each rank's position (feeds.merge_positions)
        position = merge_positions(self._gather(self.feed.position()), self.ctx.control)
        state = {"step": step, "policy_version": self.version, "lr_steps": self.learner.steps_done,
                 **position, "accuracy_by_version": self.accuracy}
        path = os.path.join(self.ctx.run_dir, "checkpoints", f"step_{step}")
        with self.ctx.timeline.span("checkpoint", step=step):
            if self.rank == 0:  # config.json + tokenizer beside the shards: the step is a model too
                save_model_files(path, unwrap(self.model).args, self.tokenizer,
                                 TORCH_DTYPES[self.resources.dtype])  # what the shards hold
            checkpoints.save(path, self.model, self.learner.optimizer, self.group, self.rank, state,
                             self.run_cfg.keep_checkpoints, self.ctx.run_dir)

    def restore(self) -> int:
        """Load run.resume (a stable step_<N>); returns N, the next step's index."""
        path = self.run_cfg.resume
        state = checkpoints.load(path, self.model, self.learner.optimizer, self.group, self.rank)
        self.version, self.learner.steps_done = state["policy_version"], state["lr_steps"]
        self.accuracy = {int(v): a for v, a in state["accuracy_by_version"].items()}
        self.feed.restore(state)  # its data position
        warmstarted = os.path.join(os.path.dirname(os.path.abspath(path)), WARMSTART_CHECKPOINT)
        if self.ref is not None and os.path.isdir(warmstarted):  # that run's RL started from its warm start
            load_sharded(self.ref, warmstarted)
        if self.rank == 0:
            publish_accuracy(self.ctx.control, self.accuracy)
        print(f"resumed from {path}: step {state['step']}, policy version {self.version}", flush=True)
        return state["step"]

    def _gather(self, obj) -> list:
        if self.group is None or self.world == 1:
            return [obj]
        out: list = [None] * self.world
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def _log_examples(self, step: int, batch: Rollout) -> None:
        """trained_examples.jsonl: the prompt ids every trainer rank trained at this step."""
        ids = batch.example_ids[::self.algorithm.group_size].tolist()
        gathered = self._gather(ids)
        if self.examples_log is not None:
            self.examples_log.write(step + 1, self.version, [i for part in gathered for i in part])
        if self.samples_log is not None:
            self.samples_log.write(step + 1, self.version, batch)

    # ---- bookkeeping --------------------------------------------------------------------
    def _out_of_time(self, t_rl: float) -> bool:
        limit = self.run_cfg.max_time_s
        flag = torch.tensor([1.0 if limit and time.time() - t_rl > limit else 0.0])
        if self.group is not None and self.world > 1:
            dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.group)
        return bool(flag.item())

    def _extra_total(self) -> int:
        return sum(self.ctx.control.extra(i) for i in range(self.feed.replicas))

    def _log(self, step: int, metrics: dict, batch: Rollout, waited_s: float, step_s: float) -> None:
        if self.log is None:
            return
        ctx = self.ctx
        # Values as measured: rounding here once logged a learning rate of 1e-6 as 0.0.
        line = {"step": step + 1, "policy_version": self.version,
                "reward/mean": metrics.pop("reward_mean"),
                **{f"trainer/{k}": v for k, v in metrics.items()},
                **getattr(self.feed, "metrics", {}), **getattr(self.sampler, "metrics", {}),
                "trainer/batch_min_policy_version": batch.policy_version,
                "generator/dropped_chunks": self._extra_total(),
                **{f"restarts/{r}": role_epoch(ctx.control.store, r) for r in self.restartable},
                "trainer/step_s": step_s, "trainer/wait_s": waited_s,
                **{f"trainer/{k}": v for k, v in ctx.timeline.totals().items() if k != "by_state_s"},
                **self.last_sync}
        line.update(rollout_stats(batch, self.generation.max_new_tokens, self.learner.eos_ids, self.episodes))
        if self.version in self.accuracy:
            line["eval/accuracy"] = self.accuracy[self.version]
            line.update(self.eval_episode_stats.get(self.version, {}))
        line = self.log.write(line, self.learner.histograms)
        print(json.dumps(line), flush=True)

    def _end_reason(self) -> EndReason:
        return trainer_end(self.version, self.run_cfg.max_steps, self.run_cfg.max_time_s)

    def _write_summary(self, rl_wall_s: float, end: EndReason) -> None:
        if self.rank != 0:
            return
        versions = sorted(self.accuracy)
        summary = {"recipe": self.recipe, "mode": "sync" if is_sync(self.algorithm) else "async",
                   "steps": self.version, "rl_wall_s": round(rl_wall_s, 2),
                   "accuracy_before": self.accuracy.get(versions[0]) if versions else None,
                   "accuracy_after": self.accuracy.get(versions[-1]) if versions else None,
                   "accuracy_by_version": self.accuracy,
                   # with an environment: each eval's eval/turns_mean, eval/tool_calls_mean, ... (version 0's
                   # included: the eval before RL has no metrics line)
                   **({"eval_episodes_by_version": self.eval_episode_stats} if self.eval_episode_stats else {}),
                   "dropped_chunks": self._extra_total(),
                   "data_skipped_lines": self.data_skipped,
                   "warnings": self.log.signal.warnings(),  # why the run could not learn, in words
                   **end.fields()}  # why it ended (observe/end_reason.py)
        with open(os.path.join(self.ctx.run_dir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)

    def close(self) -> None:
        self.feed.close()
        self.publisher.close()
        if self.log is not None:
            self.log.close()
            self.examples_log.close()
        if self.samples_log is not None:
            self.samples_log.close()
        if self.eval_episodes is not None:
            self.eval_episodes.close()
