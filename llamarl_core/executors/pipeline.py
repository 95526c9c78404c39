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

from llamarl_core.executors.context import WorkerContext


def build_role(ctx: WorkerContext):
    """The executor of `ctx.role`, wired to its feeds and publishers (each has a `run()`)."""
    role = ctx.role
    if role == "generator":
        from llamarl_core.executors.generator import GeneratorExecutor
        return GeneratorExecutor(ctx)
    if role == "reward":
        from llamarl_core.executors.reward import RewardExecutor
        return RewardExecutor(ctx)
    if role == "trainer":  # k >= 1: rows from the reward role, weights to the generator role
        from llamarl_core.executors.trainer import async_trainer
        return async_trainer(ctx)
    if role == "actor":  # k = 0: the same trainer loop, generating its own rows
        from llamarl_core.executors.trainer import sync_actor
        return sync_actor(ctx)
    raise SystemExit(f"llamarl worker: unknown role {role!r}")
