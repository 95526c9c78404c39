"""The supervised warm start as a stage of its own: steps on reference solutions, then an
HF-format checkpoint RL can start from.

    llamarl train                                     # warm start → checkpoints/warmstart → RL
    llamarl train model.checkpoint=<run>/checkpoints/warmstart warmstart.steps=0   # RL only

Why a stage: RL runs compared from one shared start (sync vs async, the quality bench's
configurations and seeds) differ only in RL. The trainer role runs `warmstart_steps` on its
ranks and saves the checkpoint; `pipeline.run_warmstart` does the same in one process
(benchmarks), drawing the same batches, so its checkpoint equals a 1-rank trainer's.
"""
from __future__ import annotations

import random

from llamarl_core.config.schema import WarmStartConfig
from llamarl_core.executors.learner import WarmStart
from llamarl_core.executors.setup import sft_sequences

CHECKPOINT_NAME = "warmstart"  # <run_dir>/checkpoints/warmstart


def warmstart_steps(model, w: WarmStartConfig, seed: int, prompts, tokenizer, rank: int = 0, world: int = 1,
                    log=print, on_step=None, adam=None) -> float:
    """`w.steps` supervised steps (batches drawn with `seed`, run.seed); returns the last loss. `on_step(done, total)`
    after each step (the trainer's heartbeat and live-view progress). `adam`: a LearnerConfig
    (its `adam_betas`, `adam_eps`: trainer.*), None for the defaults.

    Every rank draws the same global batch and trains on its slice, so the warm start (and
    the accuracy RL starts from) is the same however many trainer ranks there are.
    """
    ws = WarmStart(model, w, tokenizer.pad_id, *((adam.adam_betas, adam.adam_eps) if adam else ()))
    seqs = sft_sequences(prompts, tokenizer)
    rng = random.Random(f"warmstart:{seed}")
    loss = float("nan")
    for i in range(w.steps):
        batch = rng.sample(seqs, min(w.batch_size, len(seqs)))
        loss = ws.step(batch[rank::world])
        if on_step is not None:
            on_step(i + 1, w.steps)
        if rank == 0 and (i % 20 == 0 or i == w.steps - 1):
            log(f"warmstart step {i + 1}/{w.steps} loss {loss:.4f}")
    return loss
