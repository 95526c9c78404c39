"""RL objectives as pure tensor functions: AIPO (LlamaRL), on-policy PG, PPO/GRPO clipping,
the clamp form, and group-relative advantages. No torch.distributed here. See
docs/ALGORITHMS.md.
"""
from llamarl_core.algorithms.advantages import ADVANTAGE_MODES, compute_advantages
from llamarl_core.algorithms.aipo import AGGREGATIONS, LOSS_KINDS, aggregate, aipo_loss
from llamarl_core.algorithms.metrics import importance_metrics

__all__ = [
    "ADVANTAGE_MODES", "AGGREGATIONS", "LOSS_KINDS", "aggregate", "aipo_loss",
    "compute_advantages", "importance_metrics",
]
