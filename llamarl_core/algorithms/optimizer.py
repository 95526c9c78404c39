"""The one place the policy's optimizer is built: AdamW, for RL and for the supervised warm start.

`trainer.adam_betas` / `trainer.adam_eps` reach both. Left unset, each stage keeps the betas every
measured run used: RL (0.9, 0.95), the usual LLM choice (a shorter second-moment memory follows
the gradient scale as the policy drifts; cpu_tiny's probe with 0.999 did not help), and the warm
start torch's default (0.9, 0.999), on which cpu_tiny's 130 steps were calibrated.
"""
from __future__ import annotations

from typing import Iterable, Optional, Sequence

import torch

DEFAULT_BETAS = {"rl": (0.9, 0.95), "warmstart": (0.9, 0.999)}


def adam_betas(betas: Optional[Sequence[float]], stage: str) -> tuple[float, float]:
    """`trainer.adam_betas` when set, else `stage`'s default ("rl" | "warmstart")."""
    return (float(betas[0]), float(betas[1])) if betas is not None else DEFAULT_BETAS[stage]


def policy_optimizer(params: Iterable[torch.nn.Parameter], lr: float, weight_decay: float, stage: str,
                     betas: Optional[Sequence[float]] = None, eps: float = 1e-8,
                     fused: bool = False) -> torch.optim.AdamW:
    """AdamW over `params`; `betas`/`eps`: trainer.adam_betas / trainer.adam_eps."""
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=adam_betas(betas, stage),
                             eps=eps, fused=fused)
