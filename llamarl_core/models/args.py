"""Architecture hyperparameters (Llama 1/2/3.x, Qwen2/2.5, Qwen3, Mistral) and size presets.

Pure data: the planner reads sizes from here without building a model, and the
`nn.Module` in `llama.py` is built from the same `ModelArgs`. The families differ only in
fields here, not in classes (how each maps to a `config.json`: hf_config.py):

    family     qkv_bias   qk_norm   decoupled_head_dim   rope_scaling
    llama      -          -         optional             llama3 / linear / none
    mistral    -          -         optional (Nemo)      none
    qwen2      yes        -         -                    none
    qwen3      -          yes       often (128)          none

`param_shapes` is the one list of parameter names and shapes: `num_params`, the DDMA byte
count (sim/ddma_bytes.py) and the tests read it, and a test checks it against the module.
Published dimensions come from the Llama 3 / 3.1 model cards and `config.json` files
(arXiv 2407.21783, table 3).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Optional

# Byte-level vocabulary of the tiny models: 256 byte values + pad, bos, eos, and one reserved.
BYTE_VOCAB_SIZE = 260
# Hugging Face model types built by `Llama` (what each needs: the table above).
FAMILIES = ("llama", "mistral", "qwen2", "qwen3")


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
    # RoPE frequency scaling, or None for plain RoPE: Llama-3.1's {"rope_type": "llama3",
    # "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}
    # (a dict without "rope_type" is llama3), or {"rope_type": "linear", "factor"}.
    rope_scaling: Optional[dict] = None
    max_seq_len: int = 8192
    tie_embeddings: bool = False
    # The Hugging Face `model_type` the weights came from and are exported as (FAMILIES).
    family: str = "llama"
    qkv_bias: bool = False  # Qwen2: biases on the q/k/v projections (not on o)
    qk_norm: bool = False  # Qwen3: RMSNorm over each head's q and k (weights [head_dim]), before RoPE
    # Per-head width when it is not dim // n_heads (Qwen3, Mistral-Nemo); None = dim // n_heads.
    decoupled_head_dim: Optional[int] = None

    @property
    def head_dim(self) -> int:
        return self.decoupled_head_dim or self.dim // self.n_heads

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"family={self.family!r} is not one of {', '.join(FAMILIES)}")
        # Each switch exists in exactly one family's config.json, so an export can say it.
        if self.qkv_bias != (self.family == "qwen2") or self.qk_norm != (self.family == "qwen3"):
            raise ValueError(f"family={self.family!r} with qkv_bias={self.qkv_bias}, qk_norm={self.qk_norm}: "
                             "q/k/v biases are Qwen2's and q/k norms Qwen3's")

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Full shape of every parameter of `Llama(self)`, by name, in `named_parameters` order
        (a tied output head appears once, as the embedding)."""
        d, hd, f = self.dim, self.head_dim, self.ffn_dim
        q, kv = self.n_heads * hd, self.n_kv_heads * hd
        shapes: dict[str, tuple[int, ...]] = {"tok_embeddings.weight": (self.vocab_size, d)}
        for i in range(self.n_layers):
            p = f"layers.{i}."
            shapes[p + "attention_norm.weight"] = (d,)
            for proj, rows in (("wq", q), ("wk", kv), ("wv", kv)):
                shapes[p + f"attention.{proj}.weight"] = (rows, d)
                if self.qkv_bias:
                    shapes[p + f"attention.{proj}.bias"] = (rows,)
            shapes[p + "attention.wo.weight"] = (d, q)
            if self.qk_norm:
                shapes[p + "attention.q_norm.weight"] = (hd,)
                shapes[p + "attention.k_norm.weight"] = (hd,)
            shapes |= {p + "ffn_norm.weight": (d,), p + "feed_forward.w1.weight": (f, d),
                       p + "feed_forward.w2.weight": (d, f), p + "feed_forward.w3.weight": (f, d)}
        shapes["norm.weight"] = (d,)
        if not self.tie_embeddings:
            shapes["output.weight"] = (self.vocab_size, d)
        return shapes

    def num_params(self) -> int:
        """Exact parameter count of `Llama(self)`: the sum over `param_shapes`, in closed form
        (the simulator calls this often at 405B sizes); tests check both against the module."""
        d, hd, f = self.dim, self.head_dim, self.ffn_dim
        q, kv = self.n_heads * hd, self.n_kv_heads * hd
        attn = 2 * q * d + 2 * kv * d  # wq, wo, wk, wv
        attn += (q + 2 * kv) * self.qkv_bias + 2 * hd * self.qk_norm
        per_layer = attn + 3 * d * f + 2 * d  # + w1, w2, w3 and the two norms
        head = 0 if self.tie_embeddings else self.vocab_size * d
        return self.n_layers * per_layer + self.vocab_size * d + head + d  # + final norm

    def kv_bytes_per_token(self, bytes_per_elem: int) -> int:
        """KV-cache bytes one token occupies across all layers (K and V)."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * bytes_per_elem

    def to_dict(self) -> dict:
        return asdict(self)


_LLAMA31_SCALING = {
    "rope_type": "llama3",
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


__all__ = ["FAMILIES", "ModelArgs", "PRESETS", "BYTE_VOCAB_SIZE", "get_preset", "with_overrides"]
