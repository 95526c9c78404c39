"""KL to the reference policy, per token, by one of Schulman's three estimators.

With x = log pi - log ref on a token sampled from the policy (Schulman 2020, "Approximating KL
Divergence", joschu.net/blog/kl-approx.html):

    k1 = x                      unbiased for KL(pi || ref), high variance, can be negative
    k2 = x^2 / 2                biased (low when pi ~ ref), always >= 0
    k3 = exp(-x) + x - 1        unbiased and >= 0 (veRL's "low_var_kl", TRL's GRPO term)

veRL names them `kl` / `k1`, `mse` / `k2`, `low_var_kl` / `k3` (`core_algos.kl_penalty`).
Where the term goes (`algorithm.kl_in`: the loss, or subtracted from the reward as InstructGPT
does) is the caller's choice; this module only estimates.
"""
from __future__ import annotations

import torch

from llamarl_core.config.choices import KL_ESTIMATORS


def kl_estimate(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token KL estimate [B, T]; differentiable in `logprobs`, the reference detached."""
    x = logprobs - ref_logprobs.detach().to(logprobs.dtype)  # [B, T] log pi - log ref
    if estimator == "k1":
        return x  # [B, T]
    if estimator == "k2":
        return 0.5 * x * x  # [B, T]
    if estimator == "k3":
        return torch.exp(-x) + x - 1.0  # [B, T]
    raise ValueError(f"kl estimator must be one of {KL_ESTIMATORS}, got {estimator!r}")


@torch.no_grad()
def kl_reward_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor,
                      estimator: str, kl_coef: float) -> tuple[torch.Tensor, torch.Tensor]:
    """KL in the reward (InstructGPT, arXiv 2203.02155 eq. 2; veRL `use_kl_in_reward`): each
    sequence's penalty kl_coef * sum_t k_t over its counted tokens [B], detached, and the
    per-token KL's masked sum and token count (for a mean over several calls) as a [2] tensor."""
    mask = mask.to(torch.float32)  # [B, T]
    kl = kl_estimate(logprobs.float(), ref_logprobs.float(), estimator) * mask  # [B, T]
    penalty = kl_coef * kl.sum(dim=-1)  # [B]
    return penalty, torch.stack([kl.sum(), mask.sum()])  # [B], [2]
