"""Corrections for the train-inference mismatch mu != pi_old: the generator's sampler (its
kernels, its precision, its lag) gives the sampled tokens probabilities mu that the trainer's
policy before its update, pi_old, does not reproduce exactly. Both weights are detached and
multiply each token's loss (`aipo_loss`), whose own ratio is then pi/pi_old.

- ``tis`` (token-level truncated IS; Yao et al. 2025, "Your Efficient RL Framework Secretly
  Brings You Off-Policy RL Training", fengyao.notion.site/off-policy-rl):
  w_t = min(pi_old_t / mu_t, C).
- ``mis`` (sequence-level masked IS; Liu, Li et al. 2025, "When Speed Kills Stability:
  Demystifying RL Collapse from the Training-Inference Mismatch"):
  rho_i = exp(sum_t log(pi_old_t / mu_t)) over the sequence's counted tokens, and every token
  of sequence i gets w = rho_i if rho_i <= C, else 0 (the whole sequence is masked).

Matched to TRL's `GRPOTrainer._generate_and_score_completions` (trl/trainer/grpo_trainer.py,
`vllm_importance_sampling_mode` = `token_truncate` and `sequence_mask`): the log-ratio is
multiplied by the mask before the sum, the kept sequence weight is rho_i itself (not capped or
normalised), and the cap C is `vllm_importance_sampling_cap`.
"""
from __future__ import annotations

import torch

from llamarl_core.algorithms.metrics import as_float
from llamarl_core.config.choices import MISMATCH_MODES

MAX_LOG_RATIO = 20.0  # exp(20) ~ 5e8: a sum of log-ratios stays finite (and far above any cap)


@torch.no_grad()
def mismatch_weight(old_logprobs: torch.Tensor, behavior_logprobs: torch.Tensor, mask: torch.Tensor,
                    mode: str, cap: float) -> tuple[torch.Tensor, dict[str, float]]:
    """The weight [B, T] multiplying each token's loss, and its metrics over counted tokens."""
    if mode not in MISMATCH_MODES or mode == "none":
        raise ValueError(f"mismatch mode must be one of {MISMATCH_MODES[1:]}, got {mode!r}")
    mask = mask.to(torch.float32)  # [B, T]
    log_ratio = (old_logprobs.float() - behavior_logprobs.float()) * mask  # [B, T] log pi_old/mu
    if mode == "tis":
        weight = torch.exp(log_ratio.clamp(max=MAX_LOG_RATIO)).clamp(max=cap)  # [B, T]
        masked = torch.zeros_like(weight, dtype=torch.bool)  # [B, T] none: truncation keeps them
    else:  # mis
        seq = torch.exp(log_ratio.sum(dim=-1, keepdim=True).clamp(max=MAX_LOG_RATIO))  # [B, 1] rho_i
        masked = (seq > cap).expand_as(log_ratio)  # [B, T]
        weight = seq.masked_fill(seq > cap, 0.0).expand_as(log_ratio)  # [B, T]
    count = mask.sum().clamp(min=1.0)  # []
    metrics = {"mismatch_weight_mean": as_float((weight * mask).sum() / count),
               "mismatch_masked_frac": as_float((masked * mask).sum() / count)}
    return weight, metrics
