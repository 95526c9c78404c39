"""Group-relative advantages: each completion's reward against its own prompt's group.

LlamaRL (arXiv 2505.24034, AIPO) uses the reward minus the mean reward of the prompt's
group of samples. Variants by config:
- ``mean``: ``A_i = r_i - mean(r_group)`` (the paper's choice).
- ``loo``:  ``A_i = r_i - mean(r_group without i)`` = ``G/(G-1) * (r_i - mean)``
  (leave-one-out / RLOO baseline, unbiased because the baseline excludes the sample).
- ``std``:  ``A_i = (r_i - mean) / (std + eps)`` (GRPO; population std).
A group whose rewards are all equal carries no signal and gets exactly 0, never NaN.
"""
from __future__ import annotations

import torch

from llamarl_core.config.choices import ADVANTAGE_MODES
from llamarl_core.config.schema import AlgorithmConfig
STD_EPS = 1e-6


def compute_advantages(rewards: torch.Tensor, group_size: int,
                       mode: str = AlgorithmConfig.advantage) -> torch.Tensor:
    """Per-completion advantages; rows grouped contiguously (N = num_prompts * group_size)."""
    if mode not in ADVANTAGE_MODES:
        raise ValueError(f"advantage mode must be one of {ADVANTAGE_MODES}, got {mode!r}")
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [N], got shape {tuple(rewards.shape)}")
    if group_size < 1 or rewards.numel() % group_size != 0:
        raise ValueError(
            f"rewards has {rewards.numel()} entries, not a multiple of group_size={group_size}"
        )
    if mode == "loo" and group_size < 2:
        raise ValueError("advantage mode 'loo' needs group_size >= 2")
    grouped = rewards.float().view(-1, group_size)  # [P, G]
    mean = grouped.mean(dim=1, keepdim=True)  # [P, 1]
    centered = grouped - mean  # [P, G]
    # Equal rewards: make the centred value exactly 0 (float rounding can leave ~1e-8).
    equal = (grouped == grouped[:, :1]).all(dim=1, keepdim=True)  # [P, 1]
    centered = torch.where(equal, torch.zeros_like(centered), centered)  # [P, G]
    if mode == "mean":
        advantages = centered  # [P, G]
    elif mode == "loo":
        advantages = centered * (group_size / (group_size - 1))  # [P, G]
    else:
        std = grouped.std(dim=1, keepdim=True, correction=0)  # [P, 1]
        advantages = centered / (std + STD_EPS)  # [P, G]
    out_dtype = rewards.dtype if rewards.is_floating_point() else torch.float32
    return advantages.reshape(-1).to(out_dtype)  # [N]
