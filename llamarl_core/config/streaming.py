"""The run-mode decisions every path asks: sync or async (`is_sync`), and whether the trainer
starts a step's micro-batches on its groups as they arrive (`resources.trainer.stream_groups`).
Generator replicas (async, k >= 1) always stream prompts across steps (executors/stream.py); sync
mode (k = 0) keeps its colocated chunked step, the paper's baseline. `llamarl plan` shows both.
"""
from __future__ import annotations


def is_sync(algorithm) -> bool:
    """k = 0: the synchronous baseline, one colocated actor role generating and training in turn;
    k >= 1: async. `algorithm`: the config section, or anything with its k (sim's SimInputs)."""
    return algorithm.max_offpolicy_steps == 0


def stream_groups_active(cfg) -> bool:
    """Micro-batches on groups as they arrive (executors/train_step.py): async mode, one trainer
    rank (with more, each micro-batch is a collective a rank could enter while its peer still waits
    for rows a restarted generator can make only once both ranks handed it weights), one update
    per batch and no dynamic sampling (both need the whole batch before the first micro-batch)."""
    a, t = cfg.algorithm, cfg.resources.trainer
    return (bool(t.stream_groups) and not is_sync(a) and t.num_devices == 1
            and a.updates_per_batch * a.mini_batches == 1 and not a.dynamic_sampling)
