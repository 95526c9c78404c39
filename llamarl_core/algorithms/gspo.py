"""GSPO's sequence-level importance ratio (Zheng et al. 2025, "Group Sequence Policy
Optimization", arXiv 2507.18071), the ratio `aipo_loss(kind="gspo")` clips.

GSPO replaces PPO's per-token ratio by one per sequence, the geometric mean of its tokens':

    s_i = exp( (1/|y_i|) * sum_t log(pi_t / mu_t) )     over the sequence's counted tokens
    J_i = min(s_i * A_i, clip(s_i, 1-eps_low, 1+eps_high) * A_i)

and differentiates it through the GSPO-token form (section 4.2), s_{i,t} = sg[s_i] * pi_t / sg[pi_t]:
its value is s_i on every token of sequence i, its gradient s_i * grad log pi_t. With a per-
sequence advantage and sequence_mean aggregation the loss is the paper's -(1/G) sum_i J_i, and
its gradient (1/|y_i|) sum_t s_i * A_i * grad log pi_t is exactly the sequence-level one.
veRL builds the same tensor (`compute_policy_loss_gspo` in verl/trainer/ppo/core_algos.py,
`policy_loss.loss_mode=gspo`, aggregated seq-mean-token-mean); TRL's
`importance_sampling_level="sequence"` keeps s_i as a [B, 1] column with the gradient through
the mean, which gives the same gradient under every aggregation (its docs pair it with
`loss_type="grpo"`, our sequence_mean). The clip range is the caller's: the paper's is
eps_low = 3e-4, eps_high = 4e-4 (section 5.1), far narrower than PPO's token-level 0.2.

Several updates per batch: s_i is taken on log(pi/pi_old) and AIPO's fixed per-token weight
w = min(pi_old/mu, rho) multiplies the objective, as for `ppo` (algorithms/aipo.py).
"""
from __future__ import annotations

import torch


def sequence_ratio(
    log_ratio: torch.Tensor,  # [B, T] log(pi / anchor) per token, differentiable through pi
    mask: torch.Tensor,  # [B, T] 0/1, the tokens that count
) -> torch.Tensor:
    """s_{i,t} = sg[s_i] * pi_t / sg[pi_t]: the value s_i on each token, gradient s_i * grad log pi_t."""
    tokens = mask.sum(dim=-1).clamp(min=1.0)  # [B]
    seq_log = (log_ratio * mask).sum(dim=-1) / tokens  # [B] log s_i, the mean token log-ratio
    return torch.exp(seq_log.detach()[:, None] + log_ratio - log_ratio.detach())  # [B, T]
