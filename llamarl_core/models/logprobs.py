"""Per-token log-probabilities: the one definition shared by the trainer (π) and the
generation engine (μ), so that on-policy importance ratios are exactly 1 up to float noise.
"""
from __future__ import annotations

import torch


def check_sampling_temperature(temperature: float) -> None:
    """The one runtime guard for `temperature > 0` (every log-prob function calls it). A user
    meets the config's check first: generation.temperature is refused in config/schema.py,
    which names the key; this one guards direct callers."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for a sampling distribution, got {temperature} "
                         f"(greedy decoding has none)")


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """logits [B, T, V], targets [B, T] -> log softmax(logits / temperature) at targets [B, T]."""
    check_sampling_temperature(temperature)
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)  # [B, T, V]
    return logp.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)  # [B, T]
