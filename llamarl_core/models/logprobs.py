"""The rule every log-prob function shares: a sampling distribution needs `temperature > 0`.

The log-prob definition itself, for μ and π alike, is generation/sampling.py's
`sampled_token_logprobs`; it and its chunked forms call this guard.
"""
from __future__ import annotations


def check_sampling_temperature(temperature: float) -> None:
    """The one runtime guard for `temperature > 0` (every log-prob function calls it). A user
    meets the config's check first: generation.temperature is refused in config/schema.py,
    which names the key; this one guards direct callers."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for a sampling distribution, got {temperature} "
                         f"(greedy decoding has none)")
