"""`config.json` <-> `ModelArgs` for Hugging Face Llama checkpoints.

Two dialects exist in the wild and both are read:
  * Llama-3.1 checkpoints as Meta ships them (transformers 4.x): top-level `rope_theta` and
    `rope_scaling = {"rope_type": "llama3", "factor", "low_freq_factor", ...}` (older files
    say `"type"` instead of `"rope_type"`);
  * transformers 5.x: `rope_parameters = {"rope_theta", "rope_type", ...}`.
We write both (5.x reads `rope_parameters`, 4.x reads `rope_theta`/`rope_scaling`), so our
checkpoints load in either.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from .args import ModelArgs

_SCALING_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


def _require(cfg: dict, key: str, source: str):
    if key not in cfg:
        raise KeyError(f"{source}: required field {key!r} is missing")
    return cfg[key]


def _rope_from_config(cfg: dict, source: str) -> tuple[float, Optional[dict]]:
    params = cfg.get("rope_parameters")
    if isinstance(params, dict) and "rope_theta" in params:  # transformers 5.x dialect
        theta, rope_type, scaling = params["rope_theta"], params.get("rope_type", "default"), params
    else:  # transformers 4.x / Meta-shipped dialect
        theta = cfg.get("rope_theta", 10000.0)
        scaling = cfg.get("rope_scaling") or {}
        rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type == "default":
        return float(theta), None
    if rope_type != "llama3":
        raise ValueError(f"{source}: rope type {rope_type!r} is not supported (only 'default', 'llama3')")
    missing = [k for k in _SCALING_KEYS if k not in scaling]
    if missing:
        raise KeyError(f"{source}: llama3 rope scaling lacks fields {missing}")
    return float(theta), {k: scaling[k] for k in _SCALING_KEYS}


def args_from_hf_config(cfg: dict, source: str = "config.json") -> ModelArgs:
    model_type = cfg.get("model_type", "llama")
    if model_type != "llama":
        raise ValueError(f"{source}: model_type {model_type!r} is not a Llama checkpoint")
    for flag in ("attention_bias", "mlp_bias"):
        if cfg.get(flag):
            raise ValueError(f"{source}: {flag}=true is not supported by this Llama implementation")
    dim = _require(cfg, "hidden_size", source)
    n_heads = _require(cfg, "num_attention_heads", source)
    head_dim = cfg.get("head_dim")
    if head_dim is not None and head_dim != dim // n_heads:
        raise ValueError(f"{source}: head_dim={head_dim} differs from hidden_size/num_attention_heads"
                         f"={dim // n_heads}; decoupled head_dim is not supported")
    theta, scaling = _rope_from_config(cfg, source)
    return ModelArgs(
        vocab_size=_require(cfg, "vocab_size", source),
        dim=dim,
        n_layers=_require(cfg, "num_hidden_layers", source),
        n_heads=n_heads,
        n_kv_heads=cfg.get("num_key_value_heads") or n_heads,
        ffn_dim=_require(cfg, "intermediate_size", source),
        norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        rope_theta=theta,
        rope_scaling=scaling,
        max_seq_len=int(cfg.get("max_position_embeddings", 8192)),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
    )


def hf_config_from_args(args: ModelArgs, bos_id: Optional[int], eos_id: Optional[int],
                        pad_id: Optional[int], dtype_name: str) -> dict:
    rope_parameters = {"rope_theta": args.rope_theta, "rope_type": "default"}
    rope_scaling = None
    if args.rope_scaling:
        rope_scaling = {"rope_type": "llama3", **args.rope_scaling}
        rope_parameters.update(rope_scaling)
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": args.vocab_size,
        "hidden_size": args.dim,
        "intermediate_size": args.ffn_dim,
        "num_hidden_layers": args.n_layers,
        "num_attention_heads": args.n_heads,
        "num_key_value_heads": args.n_kv_heads,
        "head_dim": args.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": args.max_seq_len,
        "rms_norm_eps": args.norm_eps,
        "rope_theta": args.rope_theta,
        "rope_scaling": rope_scaling,
        "rope_parameters": rope_parameters,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": args.tie_embeddings,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "pad_token_id": pad_id,
        "dtype": dtype_name,
        "torch_dtype": dtype_name,
    }


def read_config(path: Path) -> dict:
    import json

    file = Path(path) / "config.json"
    if not file.is_file():
        raise FileNotFoundError(f"no config.json in checkpoint directory {path}")
    try:
        return json.loads(file.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{file}: invalid JSON at line {err.lineno}: {err.msg}") from err
