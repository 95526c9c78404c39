"""The pipeline: which roles a run has, how they are linked, and who waits for whom.

One async step (k = algorithm.max_offpolicy_steps ≥ 1; replica i of G generator replicas, trainer
rank t of T, reward rank i mod R). Arrows are messages; [Wn] are the only places a role waits on
another; SWAP is where weights change, STALENESS where it is bounded.

  TRAINER rank t                  REWARD rank i mod R             GENERATOR replica i
  trainer.py, rl_step.py,         reward.py                       generator.py, generate_loop.py
  feeds.py, publishers.py
  ──────────────────────────────  ──────────────────────────────  ──────────────────────────────────
  warm start, eval of v0
  publish v0 ════════════════════ weights (DDMA) ═══════════════▶ [W0] holds nothing until v0 lands
    weights/published = 0 ──────▶ [W3] waits for it, opens links  each turn, the first that holds:
  feed.start(): opens links                                       ├ a version fully arrived?
  for step v = 0, 1, …:                                           │   adopt it: SWAP (slot flip)
   [W4] this rank's slice of each ◀─ rows(lo, hi) ─ each group is ◀── a prompt group, as it ends
        replica feeding t: its next  scored as it comes; a whole  ├ [W1] a send failed? wait for
        chunk, chunks in order (a    chunk's rows are routed to   │      the restart verdict
        later chunk's early groups   the trainer ranks unchanged  ├ [W2] may_start(n, held):
        wait in the buffer)                                       │      n − extra_i ≤ held + k
                                                                  │      STALENESS (admission.py)
                                                                  │   no: wait for [W2] or
                                                                  │   a new version
   [W5] every trainer rank has                                    └ yes: stream chunks n, n+1, …
        its rows (collected/v)                                      (stream.py), each admitted by
   TrainStep: AIPO                                                  [W2] before its first row, each
     (all-reduce over T)                                            prompt group sent as it ends;
   publish v+1 ══[W6]════════════ weights (DDMA) ═══════════════▶   a version that fully arrived is
   eval, checkpoint when due;                                       adopted in place between decode
   one metrics.jsonl line                                           steps: SWAP (a row keeps the
                                                                    version it started under)

  Who waits for what, what unblocks it, where it is:
   [W0] held ≥ 0                    ← v0 (vN on resume) fully arrived  admission.Admission.may_start
   [W1] no send failed              ← the controller's verdict on a    rejoin.await_verdict
                                      reward restart
   [W2] chunk − extra_i ≤ held + k  ← a newer version adopted, or an   admission.Admission.may_start
                                      extra chunk of i taken (resample)
   [W3] published version ≥ 0       ← trainer rank 0 published v0      reward.RewardExecutor.run
   [W4] slice of i's next chunk     ← its reward rank sent the rows    feeds.RewardFeed._chunk_slice
   [W5] collected/<v> = T           ← the slowest trainer rank's rows  feeds.RewardFeed.wait_for_peers
   [W6] each generator left the     ← its SWAP (at a decode-step       transport/ddma.py DdmaSender.send
        slot v+1 goes into            boundary): adopted/<n-1>/<g>;
                                      one slot: free/<n>/<g>, it paused
  Every wait also polls `should_stop` (run ended or aborted) and, on the trainer, restarts of
  the other roles (executors/rejoin.py); none waits longer than controller.step_timeout_s.

  The admission rule behind STALENESS (executors/admission.py, its one docstring and function):
  the trainer takes replica i's chunks in order [W4], so chunk n is trained at step n − extra_i
  exactly; starting it only when held ≥ (n − extra_i) − k [W2] keeps every row within k versions
  of the policy that trains on it. Nothing is dropped or generated again; only chunks taken
  beyond a step's one (dynamic sampling) move extra_i on.

Sync mode (k = 0): one `actor` role replaces generator and trainer. Its feed (`OwnChunks`)
generates this rank's chunk with the weights it trains (admitted by the same rule: one slot), sends it to the reward rank and waits
for it scored [W4]; its publisher (`InPlace`) only refreshes the engine (the module is shared).

Roles talk only through the Protocols of executors/ports.py: a trainer reads a `RolloutFeed` and
writes a `WeightPublisher`; a generator reads a `WeightReceiver`; all share a `ControlStore`.
This module and the worker entry (runtime/worker.py) are the only code that sees the whole
config: each component gets its own sections (the `*_config` functions below, or a section
itself, e.g. `resources.reward`) plus the rank's `RoleRuntime` (executors/context.py: where it
sits, the control store, the links' address, its timeline), which the worker entry builds.

  component            its sections (each also gets the RoleRuntime)
  GeneratorExecutor    ChunkConfig (with env and the prompt format: its episodes), model, data,
                       resources.generator, WeightSyncConfig, algorithm.max_offpolicy_steps
  RewardExecutor       model (the tokenizer), data, resources.reward, prompts_per_step, group_size,
                       whether to forward each group as scored (config/streaming.py), reward.max_abs
  TrainerExecutor      model, resources.trainer, algorithm, data, generation, warmstart, run, logging,
                       recipe, export.dtype, env.enabled, LearnerConfig, HeldoutConfig; its feed and publisher:
  WeightSync / InPlace WeightSyncConfig, resources.trainer.strategy / none
  RewardFeed/OwnChunks FeedConfig (algorithm's batch shape and k, replicas, generator quantization)
                       and a FeedRuntime (the RoleRuntime's store, links and restart verdicts)
"""
from __future__ import annotations

from llamarl_core.config.layout import resolve_transport, trainer_shards
from llamarl_core.config.schema import LlamaRLConfig
from llamarl_core.config.streaming import stream_groups_active
from llamarl_core.data import prompt_format
from llamarl_core.eval.heldout import HeldoutConfig
from llamarl_core.executors.chunks import ChunkConfig
from llamarl_core.executors.context import RoleRuntime
from llamarl_core.executors.learner import LearnerConfig
from llamarl_core.executors.weights import WeightSyncConfig


def build_role(cfg: LlamaRLConfig, plan, ctx: RoleRuntime):
    """The executor of `ctx.role`, wired to its feeds and publishers (each has a `run()`); a role's
    modules are imported here, so a worker loads only its own role's code."""
    role = ctx.role
    if role == "generator":
        from llamarl_core.executors.generator import GeneratorExecutor
        return GeneratorExecutor(ctx, chunk_config(cfg), cfg.model, cfg.data, cfg.resources.generator,
                                 weight_sync_config(cfg, plan), cfg.algorithm.max_offpolicy_steps)
    if role == "reward":
        from llamarl_core.executors.reward import RewardExecutor
        a = cfg.algorithm
        return RewardExecutor(ctx, cfg.model, cfg.data, cfg.resources.reward, a.prompts_per_step, a.group_size,
                              forward_groups=stream_groups_active(cfg), max_abs=cfg.reward.max_abs)
    if role in ("trainer", "actor"):
        from llamarl_core.executors.feeds import OwnChunks, RewardFeed
        from llamarl_core.executors.publishers import InPlace, WeightSync
        from llamarl_core.executors.trainer import TrainerExecutor
        if role == "trainer":  # k >= 1: rows from the reward role, weights to the generator role
            sync = weight_sync_config(cfg, plan)

            def make_feed(t):
                return RewardFeed(feed_config(cfg, ctx), feed_runtime(ctx), t.rank, t.world)

            def make_publisher(t):
                return WeightSync(ctx, sync, cfg.resources.trainer.strategy, t.rank, t.model, t.raw)
        else:  # k = 0: the same trainer loop; the colocated actor ranks generate their own rows
            def make_feed(t):
                return OwnChunks(feed_config(cfg, ctx), feed_runtime(ctx), chunk_config(cfg), t.rank, t.world,
                                 t.raw, t.tokenizer, t.train_prompts)

            def make_publisher(t):
                return InPlace(ctx, t.rank, t.feed)
        return TrainerExecutor(ctx, cfg.model, cfg.resources.trainer, cfg.algorithm, cfg.data, cfg.generation,
                               cfg.warmstart, cfg.run, cfg.logging, learner_config(cfg), heldout_config(cfg),
                               make_feed, make_publisher, recipe=cfg.recipe, export_dtype=cfg.export.dtype,
                               episodes=cfg.env.enabled)
    raise SystemExit(f"llamarl worker: unknown role {role!r}")


# ---- each component's own sections, from the whole config -------------------------------
def chunk_config(cfg: LlamaRLConfig) -> ChunkConfig:
    return ChunkConfig(cfg.generation, cfg.resources.generator.max_batch_size, cfg.algorithm.prompts_per_step,
                       cfg.algorithm.group_size, cfg.run.seed, cfg.env, prompt_format(cfg.data))


def feed_config(cfg: LlamaRLConfig, ctx: RoleRuntime):
    from llamarl_core.executors.feeds import FeedConfig  # the trainer's modules: trainer ranks only
    a = cfg.algorithm
    return FeedConfig(a.prompts_per_step, a.group_size, a.max_offpolicy_steps, ctx.generator_replicas,
                      cfg.resources.generator.quantization, stream_groups_active(cfg))


def feed_runtime(ctx: RoleRuntime):
    """The worker's objects a trainer feed uses: store, timeline, links and restart verdicts."""
    from llamarl_core.executors import rejoin
    from llamarl_core.executors.feeds import FeedRuntime
    return FeedRuntime(ctx.control, ctx.timeline, ctx.should_stop, lambda: rejoin.links(ctx),
                       lambda role, rank: rejoin.endpoint(ctx, role, rank), lambda: rejoin.my_endpoint(ctx),
                       ctx.reward_rank_for, lambda e: rejoin.await_verdict(ctx, rejoin.watch(ctx, []), e))


def heldout_config(cfg: LlamaRLConfig) -> HeldoutConfig:
    return HeldoutConfig(cfg.generation, cfg.data, cfg.resources.generator.max_batch_size, cfg.run.seed,
                         cfg.logging.samples_per_eval, cfg.env)


def learner_config(cfg: LlamaRLConfig) -> LearnerConfig:
    betas = cfg.trainer.adam_betas  # None: the stage's default (algorithms/optimizer.py)
    return LearnerConfig(cfg.algorithm, cfg.generation, cfg.resources.trainer.micro_batch_size,
                         cfg.run.max_steps, stream_groups_active(cfg), cfg.trainer.max_nonfinite_steps,
                         None if betas is None else tuple(float(b) for b in betas), cfg.trainer.adam_eps)


def weight_sync_config(cfg: LlamaRLConfig, plan) -> WeightSyncConfig:
    """Both ends' weight-sync settings; `plan`: the launch plan (its trainer ranks and nodes)."""
    r = cfg.resources
    trainer = plan.role("trainer")
    world = trainer.num_devices if trainer else 1
    return WeightSyncConfig(transport=resolve_transport(cfg.controller.weight_transport, r, plan.nodes),
                            generator_dtype=r.generator.dtype, trainer_dtype=r.trainer.dtype,
                            fp8=r.generator.quantization == "fp8", bucket_mb=cfg.controller.weight_bucket_mb,
                            num_slots=r.generator.weight_slots, trainer_shards=trainer_shards(r.trainer, world),
                            checksums=cfg.run.weight_checksums, adapters_only=cfg.model.lora.enabled)
