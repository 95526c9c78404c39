"""Llama-3 architecture hyperparameters and size presets.

Pure data: the planner reads sizes from here without building a model, and the
`nn.Module` in `llama.py` is built from the same `ModelArgs`. Published dimensions come from
the Llama 3 / 3.1 model cards and `config.json` files (arXiv 2407.21783, table 3).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Optional

# Byte-level vocabulary of the tiny models: 256 byte values + pad, bos, eos, and one reserved.
BYTE_VOCAB_SIZE = 260


@dataclass(frozen=True)
class ModelArgs:
    vocab_size: int
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    # Llama-3.1 frequency scaling: {"factor", "low_freq_factor", "high_freq_factor",
    # "original_max_position_embeddings"} or None for plain RoPE.
    rope_scaling: Optional[dict] = None
    max_seq_len: int = 8192
    tie_embeddings: bool = False

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def num_params(self) -> int:
        """Exact parameter count of `Llama(self)` (checked against the module in tests)."""
        kv_dim = self.n_kv_heads * self.head_dim
        attn = self.dim * self.dim * 2 + self.dim * kv_dim * 2  # wq, wo, wk, wv
        mlp = 3 * self.dim * self.ffn_dim  # w1 (gate), w2 (down), w3 (up)
        norms = 2 * self.dim
        per_layer = attn + mlp + norms
        embed = self.vocab_size * self.dim
        head = 0 if self.tie_embeddings else self.vocab_size * self.dim
        return self.n_layers * per_layer + embed + head + self.dim  # + final norm

    def kv_bytes_per_token(self, bytes_per_elem: int) -> int:
        """KV-cache bytes one token occupies across all layers (K and V)."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * bytes_per_elem

    def to_dict(self) -> dict:
        return asdict(self)


_LLAMA31_SCALING = {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}

PRESETS: dict[str, ModelArgs] = {
    # Tiny byte-vocabulary models that train on a laptop CPU.
    "tiny-2m": ModelArgs(vocab_size=BYTE_VOCAB_SIZE, dim=256, n_layers=3, n_heads=4,
                         n_kv_heads=4, ffn_dim=688, rope_theta=10000.0, max_seq_len=512),
    "tiny-20m": ModelArgs(vocab_size=BYTE_VOCAB_SIZE, dim=512, n_layers=6, n_heads=8,
                          n_kv_heads=4, ffn_dim=1664, rope_theta=10000.0, max_seq_len=1024),
    "tiny-100m": ModelArgs(vocab_size=BYTE_VOCAB_SIZE, dim=768, n_layers=14, n_heads=12,
                           n_kv_heads=4, ffn_dim=2560, rope_theta=10000.0, max_seq_len=1024),
    # Published sizes (used for planning; 8.03B, 70.6B, 405.9B parameters).
    "llama3-8b": ModelArgs(vocab_size=128256, dim=4096, n_layers=32, n_heads=32,
                           n_kv_heads=8, ffn_dim=14336),
    "llama3-70b": ModelArgs(vocab_size=128256, dim=8192, n_layers=80, n_heads=64,
                            n_kv_heads=8, ffn_dim=28672),
    "llama3.1-405b": ModelArgs(vocab_size=128256, dim=16384, n_layers=126, n_heads=128,
                               n_kv_heads=8, ffn_dim=53248, rope_scaling=dict(_LLAMA31_SCALING),
                               max_seq_len=131072),
}


def get_preset(name: str) -> ModelArgs:
    if name not in PRESETS:
        raise KeyError(f"unknown model preset {name!r}; known presets: {', '.join(PRESETS)}")
    return PRESETS[name]


def with_overrides(args: ModelArgs, **kwargs) -> ModelArgs:
    return replace(args, **kwargs)


__all__ = ["ModelArgs", "PRESETS", "BYTE_VOCAB_SIZE", "get_preset", "with_overrides"]
