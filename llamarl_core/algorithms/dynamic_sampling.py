"""DAPO's dynamic sampling, the pure part: which prompt groups carry signal, which to train.

DAPO (Yu et al. 2025, arXiv 2503.14476, section 3.2): a group whose G rewards are all equal
has group-relative advantages of exactly 0 (`compute_advantages`), so it adds nothing to the
policy gradient but still dilutes the batch. Such groups are dropped and more prompts are
sampled until the step holds `prompts_per_step` informative groups; the surplus is not
trained. How the extra groups are sampled without breaking the async pipeline's credit rule
is the runtime's part (`executors/resample.py`).
"""
from __future__ import annotations

import torch


def informative_groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """[P] bool: group p's rewards are not all equal (rows grouped contiguously, N = P * G)."""
    grouped = rewards.view(-1, group_size)                                       # [P, G]
    return (grouped != grouped[:, :1]).any(dim=1)                                # [P]


def uniform_groups_frac(rewards: torch.Tensor, group_size: int) -> float:
    """Share of a batch's groups whose rewards are all equal (0.0 for an empty batch)."""
    if rewards.numel() == 0:
        return 0.0
    return float((~informative_groups(rewards, group_size)).double().mean())


def pick_groups(informative: torch.Tensor, quota: int) -> torch.Tensor:
    """Indices of the first `quota` informative groups, in arrival order."""
    return informative.nonzero().squeeze(1)[:quota]                              # [<= quota]


def group_rows(groups: torch.Tensor, group_size: int) -> torch.Tensor:
    """Row indices of the given groups, each group's G rows in order."""
    return (groups[:, None] * group_size + torch.arange(group_size)).reshape(-1)  # [len * G]
