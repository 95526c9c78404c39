"""The supervised warm start as a stage of its own: steps on reference solutions, then an
HF-format checkpoint RL can start from.

    llamarl train                                     # warm start → checkpoints/warmstart → RL
    llamarl train model.checkpoint=<run>/checkpoints/warmstart warmstart.steps=0   # RL only

Why a stage: RL runs compared from one shared start (sync vs async, the quality bench's
configurations and seeds) differ only in RL. The trainer role runs `warmstart_steps` on its
ranks and saves the checkpoint; `run_warmstart` does the same in one process (benchmarks),
drawing the same batches, so its checkpoint equals a 1-rank trainer's.
"""
from __future__ import annotations

import os
import random
import time

from llamarl_core.config.schema import LlamaRLConfig
from llamarl_core.executors.learner import WarmStart
from llamarl_core.executors.setup import build_model, encode_prompts, load_split, sft_sequences
from llamarl_core.models import save_pretrained

CHECKPOINT_NAME = "warmstart"  # <run_dir>/checkpoints/warmstart


def warmstart_steps(model, cfg: LlamaRLConfig, prompts, tokenizer, rank: int = 0, world: int = 1,
                    log=print, on_step=None) -> float:
    """`cfg.warmstart.steps` supervised steps; returns the last loss. `on_step(done, total)`
    after each step (the trainer's heartbeat and live-view progress).

    Every rank draws the same global batch and trains on its slice, so the warm start (and
    the accuracy RL starts from) is the same however many trainer ranks there are.
    """
    w = cfg.warmstart
    ws = WarmStart(model, cfg, tokenizer.pad_id)
    seqs = sft_sequences(cfg, prompts, tokenizer)
    rng = random.Random(f"warmstart:{cfg.run.seed}")
    loss = float("nan")
    for i in range(w.steps):
        batch = rng.sample(seqs, min(w.batch_size, len(seqs)))
        loss = ws.step(batch[rank::world])
        if on_step is not None:
            on_step(i + 1, w.steps)
        if rank == 0 and (i % 20 == 0 or i == w.steps - 1):
            log(f"warmstart step {i + 1}/{w.steps} loss {loss:.4f}")
    return loss


def run_warmstart(cfg: LlamaRLConfig, out_dir: str, log=print) -> dict:
    """One process: build the model as the trainer does, warm start it, save it to `out_dir`
    (HF format). Returns {"dir", "steps", "loss", "seconds"}."""
    if cfg.warmstart.steps < 1:
        raise ValueError(f"warmstart.steps={cfg.warmstart.steps}: nothing to warm start")
    t0 = time.perf_counter()
    model, tokenizer = build_model(cfg, dtype=cfg.resources.trainer.dtype)
    prompts = encode_prompts(cfg, load_split(cfg, "train"), tokenizer)
    loss = warmstart_steps(model, cfg, prompts, tokenizer, log=lambda m: log(m))
    save_pretrained(model, tokenizer, out_dir)
    return {"dir": os.path.abspath(out_dir), "steps": cfg.warmstart.steps, "loss": loss,
            "seconds": time.perf_counter() - t0}
