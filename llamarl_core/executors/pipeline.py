"""The pipeline: which roles a run has, how they are linked, and who waits for whom.

One async step (k = algorithm.max_offpolicy_steps ≥ 1; T trainer ranks, G generator replicas,
R reward ranks; arrows are data, [Wn] are the only places a role blocks on another):

  TRAINER rank t                    REWARD rank r = i mod R          GENERATOR replica i
  (trainer.py, rl_step.py,          (reward.py)                      (generator.py, generate_loop.py)
   feeds.py, publishers.py)
  ─────────────────────────────     ──────────────────────────       ─────────────────────────────────
  warm start, eval v0
  publish v0 ─── weights/published ──▶ [W3] wait published ≥ 0       [W0] receive v0 before any chunk
  feed.start(): open links             open links                    loop (generate_loop.GenerateLoop):
  for step v = 0, 1, …:                                               ├ a version fully arrived?
   [W4] collect step v's rows                                          │     → adopt it: SWAP (slot flip)
        of every replica feeding t ◀── rows(lo, hi) ── whole chunk? ◀─┼── prompt group (as it ends)
        chunk older than v − k:         score each group              ├ [W1] previous chunk taken by
        dropped, dropped/i += 1 ─────────────────────────────────────▶│      the sender thread?
        (STALENESS, trainer side)                                     ├ [W2] n − dropped_i ≤ held + k?
   [W5] wait_for_peers: every rank                                    │      (STALENESS, generator side)
        has its rows (collected/v)                                    └ generate chunk n with held u;
   learner.rl_step: AIPO, all-reduce                                    every 8 decode steps a version
   version v+1                                                          that fully arrived is adopted
   [W6] publish v+1 (DDMA): wait until                                  in place: SWAP mid-chunk, rows
        each generator adopted v ─ weights: trainer shard → staging slot ─▶ keep the version they ran
        (two slots; one slot: until it paused at a decode step), then write v+1

  Who unblocks whom, and where it lives:
   [W0] receiver.receive()           ← trainer's first publish (v0, or vN on resume)   generate_loop.receive
   [W1] sender.idle()                ← the reward rank's receive of the previous group  generate_loop.may_generate
   [W2] chunk − dropped ≤ held + k   ← a newer version adopted, or a chunk dropped     generate_loop.may_generate
   [W3] published_version() ≥ 0      ← trainer rank 0's publish of v0                   reward.RewardExecutor.run
   [W4] inbox.get()                  ← the reward rank's send of a whole chunk's rows   feeds.RewardFeed._next_fresh
   [W5] collected/<v> = T            ← the slowest trainer rank's rows                  feeds.RewardFeed.wait_for_peers
   [W6] adopted/<n−1>/<g> (free/…)   ← each generator's swap at a decode-step boundary  transport/ddma.DdmaSender._send_shm
  Every wait polls `should_stop` (run ended or aborted) and, on the trainer, restarts of the
  other roles (executors/rejoin.py); none is longer than controller.step_timeout_s.

  The credit rule that bounds staleness: replica i's chunk n is trained at step n − dropped_i,
  so starting it only when held ≥ (n − dropped_i) − k [W2] keeps every row within k versions of
  the policy that trains on it; a chunk that still arrives older than v − k [W4] is dropped and
  counted, which moves the generator's window on.

Sync mode (k = 0): one `actor` role replaces generator and trainer. Its feed (`OwnChunks`)
generates this rank's chunk with the weights it trains, sends it to the reward rank and waits
for it scored [W4]; its publisher (`InPlace`) only refreshes the engine (the module is shared).

Roles talk only through the Protocols of executors/ports.py: a trainer reads a `RolloutFeed` and
writes a `WeightPublisher`; a generator reads a `WeightReceiver`; all share a `ControlStore`.
This module and the worker entry (runtime/worker.py) are the only code that sees the whole
config: each component gets its own sections (`learner_config` below, …).
"""
from __future__ import annotations

import os
import time

from llamarl_core.config.schema import LlamaRLConfig
from llamarl_core.executors.chunks import ChunkConfig
from llamarl_core.executors.context import WorkerContext
from llamarl_core.executors.heldout import HeldoutConfig
from llamarl_core.executors.learner import LearnerConfig
from llamarl_core.executors.setup import build_model, encode_prompts, load_split
from llamarl_core.executors.warmstart import warmstart_steps
from llamarl_core.models import save_pretrained


def build_role(ctx: WorkerContext):
    """The executor of `ctx.role`, wired to its feeds and publishers (each has a `run()`)."""
    role = ctx.role
    if role == "generator":
        from llamarl_core.executors.generator import GeneratorExecutor
        return GeneratorExecutor(ctx, chunk_config(ctx.cfg))
    if role == "reward":
        from llamarl_core.executors.reward import RewardExecutor
        return RewardExecutor(ctx)
    if role in ("trainer", "actor"):
        from llamarl_core.executors.feeds import OwnChunks, RewardFeed
        from llamarl_core.executors.publishers import InPlace, WeightSync
        from llamarl_core.executors.trainer import TrainerExecutor
        if role == "trainer":  # k >= 1: rows from the reward role, weights to the generator role
            return TrainerExecutor(ctx, role, learner_config(ctx.cfg), heldout_config(ctx.cfg),
                                   make_feed=lambda t: RewardFeed(ctx, t.rank, t.world),
                                   make_publisher=lambda t: WeightSync(ctx, t.rank, t.model, t.raw))
        # k = 0: the same trainer loop; the colocated actor ranks generate their own rows with
        # the weights they train
        return TrainerExecutor(ctx, role, learner_config(ctx.cfg), heldout_config(ctx.cfg),
                               make_feed=lambda t: OwnChunks(ctx, chunk_config(ctx.cfg), t.rank, t.world, t.raw, t.tokenizer,
                                                             t.train_prompts),
                               make_publisher=lambda t: InPlace(ctx, t.rank, t.feed))
    raise SystemExit(f"llamarl worker: unknown role {role!r}")


# ---- each component's own sections, from the whole config -------------------------------
def chunk_config(cfg: LlamaRLConfig) -> ChunkConfig:
    return ChunkConfig(cfg.generation, cfg.resources.generator.max_batch_size, cfg.algorithm.prompts_per_step,
                       cfg.algorithm.group_size, cfg.run.seed)


def heldout_config(cfg: LlamaRLConfig) -> HeldoutConfig:
    return HeldoutConfig(cfg.generation, cfg.data, cfg.resources.generator.max_batch_size, cfg.run.seed,
                         cfg.logging.samples_per_eval)


def learner_config(cfg: LlamaRLConfig) -> LearnerConfig:
    return LearnerConfig(cfg.algorithm, cfg.generation, cfg.resources.trainer.micro_batch_size,
                         cfg.run.max_steps)


def run_warmstart(cfg: LlamaRLConfig, out_dir: str, log=print) -> dict:
    """One process: build the model as the trainer does, warm start it, save it to `out_dir`
    (HF format). Returns {"dir", "steps", "loss", "seconds"}."""
    if cfg.warmstart.steps < 1:
        raise ValueError(f"warmstart.steps={cfg.warmstart.steps}: nothing to warm start")
    t0 = time.perf_counter()
    model, tokenizer = build_model(cfg.model, dtype=cfg.resources.trainer.dtype, seed=cfg.run.seed)
    prompts = encode_prompts(cfg.data, cfg.generation, load_split(cfg.data, "train"), tokenizer)
    loss = warmstart_steps(model, cfg.warmstart, cfg.run.seed, prompts, tokenizer, log=lambda m: log(m))
    save_pretrained(model, tokenizer, out_dir)
    return {"dir": os.path.abspath(out_dir), "steps": cfg.warmstart.steps, "loss": loss,
            "seconds": time.perf_counter() - t0}
