"""The RL learning rate at each trainer step: linear warm-up, then constant, linear or cosine.

    step s (0-based)   s < W:  lr * (s + 1) / W                     (first step already trains)
                       s >= W: lr * (m + (1 - m) * decay(p)),  p = (s - W) / (T - W)
    decay(p)           constant: 1     linear: 1 - p     cosine: (1 + cos(pi * p)) / 2

W = algorithm.lr_warmup_steps, T = run.max_steps, m = algorithm.min_lr_ratio. The decay is the
one Hugging Face's `get_{linear,cosine}_schedule_with_warmup` and torchtune use (p reaches 1
at step T, one past the last, so the last step still trains), floored at m * lr as verl's
`min_lr_ratio`. The step counts RL steps (one batch each), not optimizer updates: with
several updates per batch every update of step s uses lr(s). The trainer saves s as `lr_steps`
in state.json, so a resumed run continues the schedule where it stopped.

The supervised warm start uses the same schedule (`warmstart_lr_at`): cosine to 10% of its
rate after a linear warm-up over the first 10% of its steps (at least one).
"""
from __future__ import annotations

import math

from llamarl_core.config.choices import LR_SCHEDULES


def lr_at(step: int, lr: float, warmup_steps: int, total_steps: int, schedule: str = "constant",
          min_lr_ratio: float = 0.0) -> float:
    """The learning rate of RL step `step` (0-based)."""
    if schedule not in LR_SCHEDULES:
        raise ValueError(f"lr schedule must be one of {LR_SCHEDULES}, got {schedule!r}")
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if schedule == "constant" or total_steps <= warmup_steps:
        return lr
    p = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
    decay = 1.0 - p if schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * p))
    return lr * (min_lr_ratio + (1.0 - min_lr_ratio) * decay)


def warmstart_lr_at(step: int, lr: float, total_steps: int) -> float:
    """The learning rate of warm-start step `step` (0-based) of `total_steps`: warm-up over the
    first tenth of the steps (at least one), then cosine to a floor of 0.1 * lr."""
    return lr_at(step, lr, max(1, total_steps // 10), total_steps, "cosine", min_lr_ratio=0.1)
