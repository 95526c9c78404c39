"""Rotary position embeddings, with Llama-3.1 and linear frequency scaling.

We use the Hugging Face "rotate half" layout (the first and second halves of each head form
the rotated pairs) rather than Meta's interleaved pairs, so HF checkpoints load with a pure
key rename and no q/k weight permutation. The frequency formula follows
`_compute_llama3_parameters` in transformers (arXiv 2407.21783, section 3.3 / the 3.1
release): low frequencies are divided by `factor`, high ones kept, the band in between
smoothly interpolated. Linear scaling (`_compute_linear_scaling_rope_parameters`) divides
every frequency by `factor`. Both leave transformers' `attention_scaling` at 1.
"""
from __future__ import annotations

import math
from typing import Optional

import torch


def rope_inv_freq(head_dim: int, theta: float, scaling: Optional[dict] = None) -> torch.Tensor:
    """Inverse frequencies [head_dim // 2] in float32."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    inv_freq = 1.0 / (theta ** exponents)
    if not scaling:
        return inv_freq
    if scaling.get("rope_type", "llama3") == "linear":
        return inv_freq / float(scaling["factor"])
    factor = float(scaling["factor"])
    low_freq_factor = float(scaling["low_freq_factor"])
    high_freq_factor = float(scaling["high_freq_factor"])
    old_context_len = float(scaling["original_max_position_embeddings"])
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def rope_tables(inv_freq: torch.Tensor, max_seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables [max_seq_len, head_dim] (each frequency repeated for both halves)."""
    positions = torch.arange(max_seq_len, dtype=torch.float32)
    freqs = positions[:, None] * inv_freq[None, :]  # [S, hd/2]
    emb = torch.cat((freqs, freqs), dim=-1)  # [S, hd]
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, H, T, hd]; cos/sin [B, 1, T, hd] already gathered at each token's position."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin
