"""PPO's clipped objective with the optional dual clip, as one pure tensor function.

PPO (Schulman et al. 2017, arXiv 1707.06347) maximises J = min(r*A, clip(r, 1-eps_low,
1+eps_high)*A). For A < 0 that is r*A once r > 1+eps_high, unbounded below: one token whose
ratio exploded (a stale or mismatched sample) can dominate the batch. Dual-clip PPO (Ye et al.
2020, arXiv 1912.09729, section 3.2) bounds it by a constant c > 1:

    J = max(min(r*A, clip(r)*A), c*A)   for A < 0;   J = min(r*A, clip(r)*A) otherwise

so the bound is active (and the gradient 0) exactly where A < 0 and r > c. veRL:
`actor.clip_ratio_c` (default 3.0) in `compute_policy_loss_vanilla`. Used by `ppo` (token
ratio), its decoupled form (r = pi/pi_old) and `gspo` (the sequence ratio, algorithms/gspo.py).
"""
from __future__ import annotations

import torch


def clipped_objective(
    ratio: torch.Tensor,  # [B, T] the ratio PPO clips, differentiable
    advantages: torch.Tensor,  # [B, T] detached
    lo: float,  # 1 - eps_low
    hi: float,  # 1 + eps_high
    dual_clip_c: float | None = None,  # None: plain PPO
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The objective to maximise per token, and where the dual-clip bound is active (None when off)."""
    objective = torch.minimum(ratio * advantages, ratio.clamp(lo, hi) * advantages)  # [B, T]
    if dual_clip_c is None:
        return objective, None
    bound = dual_clip_c * advantages  # [B, T]
    active = (advantages < 0) & (objective < bound)  # [B, T] bool: r > c on a negative advantage
    return torch.where(active, bound, objective), active  # [B, T], [B, T]
