"""`config.json` <-> `ModelArgs` for Hugging Face checkpoints of the families `Llama` builds.

Read as transformers 5.x reads them (its `configuration_*.py` and `modeling_*.py` for llama,
mistral, qwen2, qwen3 are the reference): a key a file omits takes that family's default
(`_DEFAULTS`; Qwen3's `head_dim` is 128, not hidden / heads), and RoPE comes from
`rope_scaling` when it is set, else `rope_parameters`, with `rope_theta` inside it, else at
the top level, else 10000 (`convert_rope_params_to_dict`). Both dialects exist in the wild:
Meta's Llama-3.1 files (transformers 4.x: top-level `rope_theta`, `rope_scaling = {"rope_type"
| "type": "llama3", ...}`) and 5.x's `rope_parameters`. We write both, so our exports load in
either.

Refused, with the field and its value (`UnsupportedCheckpoint`, a ValueError: the planner
turns it into exit 2 before any process starts): any feature transformers would compute and
we would not, rather than a model that silently differs. Sliding-window attention in use,
mixtures of experts, RoPE types other than default/linear/llama3 or partial rotary, logit
soft-capping, activations other than SiLU, biases other than Qwen2's q/k/v, attention
dropout, pre-quantized weights, and architectures other than `*ForCausalLM`.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from .args import FAMILIES, ModelArgs

DEFAULT_ROPE_THETA = 10000.0  # `default_theta` of every family here
ARCHITECTURES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
                 "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}
# transformers 5.x defaults of the keys a config.json may omit (None: derived from others).
_DEFAULTS = {
    "llama": {"num_key_value_heads": None, "head_dim": None, "max_position_embeddings": 2048},
    "mistral": {"num_key_value_heads": 8, "head_dim": None, "max_position_embeddings": 131072},
    "qwen2": {"num_key_value_heads": 32, "head_dim": None, "max_position_embeddings": 32768},
    "qwen3": {"num_key_value_heads": 32, "head_dim": 128, "max_position_embeddings": 32768},
}
_LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
_MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "num_experts_per_tok",
             "moe_intermediate_size", "n_shared_experts")
_SOFTCAP_KEYS = ("attn_logit_softcapping", "final_logit_softcapping", "logit_softcapping")


class UnsupportedCheckpoint(ValueError):
    """A config.json field whose value asks for something `Llama` does not compute."""

    def __init__(self, source: str, field: str, value, why: str):
        super().__init__(f"{source}: {field}={json.dumps(value)}: {why}")
        self.field, self.value = field, value


def _require(cfg: dict, key: str, source: str):
    if key not in cfg:
        raise KeyError(f"{source}: required field {key!r} is missing")
    return cfg[key]


def _get(cfg: dict, family: str, key: str):
    """The file's value (null: derived from the others), else the family's default."""
    return cfg[key] if key in cfg else _DEFAULTS[family][key]


def _sliding_window_in_use(cfg: dict, family: str, n_layers: int, max_pos: int, source: str) -> None:
    if family == "llama":
        return  # LlamaAttention never reads sliding_window
    window = cfg.get("sliding_window", 4096)  # MistralConfig's and Qwen2Config's default
    if family in ("qwen2", "qwen3"):
        # Qwen2Config drops the window unless use_sliding_window (Qwen2.5's `sliding_window:
        # 131072, use_sliding_window: false` is fine), then applies it where `layer_types` says,
        # or without one from layer `max_window_layers` on.
        if not cfg.get("use_sliding_window", False) or window is None:
            return
        types = cfg.get("layer_types")
        if types is not None:
            if all(t == "full_attention" for t in types):
                return
            field, value = "layer_types", sorted(set(types))
        elif cfg.get("max_window_layers", 28) >= n_layers:
            return  # no layer at or beyond max_window_layers
        else:
            field, value = "use_sliding_window", True
    else:  # mistral applies `sliding_window` to every layer when it is set
        if window is None:
            return
        field, value = "sliding_window", window
    if window >= max_pos:
        return  # a window as long as the longest sequence changes nothing
    raise UnsupportedCheckpoint(source, field, value, f"sliding-window attention (window {window} < "
                                f"max_position_embeddings={max_pos}) is not built")


def _rope_from_config(cfg: dict, max_pos: int, source: str) -> tuple[float, Optional[dict]]:
    field = "rope_scaling" if cfg.get("rope_scaling") else "rope_parameters"
    scaling = dict(cfg.get(field) or {})
    if any(isinstance(v, dict) for v in scaling.values()):
        raise UnsupportedCheckpoint(source, field, sorted(scaling), "RoPE per layer type is not built")
    theta = float(scaling.get("rope_theta", cfg.get("rope_theta", DEFAULT_ROPE_THETA)))
    partial = scaling.get("partial_rotary_factor", cfg.get("partial_rotary_factor"))
    if partial is not None and float(partial) != 1.0:
        raise UnsupportedCheckpoint(source, "partial_rotary_factor", partial, "partial RoPE is not built")
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type == "default":
        return theta, None
    if rope_type == "linear":
        return theta, {"rope_type": "linear", "factor": float(_require(scaling, "factor", f"{source}: {field}"))}
    if rope_type == "llama3":
        scaling.setdefault("original_max_position_embeddings", max_pos)  # as standardize_rope_params
        missing = [k for k in _LLAMA3_KEYS if k not in scaling]
        if missing:
            raise KeyError(f"{source}: llama3 rope scaling ({field}) lacks fields {missing}")
        return theta, {"rope_type": "llama3", **{k: scaling[k] for k in _LLAMA3_KEYS}}
    raise UnsupportedCheckpoint(source, f"{field}.rope_type", rope_type,
                                "only 'default', 'linear' and 'llama3' RoPE are built")


def _refuse_unsupported(cfg: dict, family: str, source: str) -> None:
    archs = cfg.get("architectures") or []
    if any(not a.endswith("ForCausalLM") for a in archs):
        raise UnsupportedCheckpoint(source, "architectures", archs, "only *ForCausalLM models are built")
    if "quantization_config" in cfg:
        method = (cfg["quantization_config"] or {}).get("quant_method", "?")
        raise UnsupportedCheckpoint(source, "quantization_config.quant_method", method,
                                    "pre-quantized weights are not read (dequantize to a plain checkpoint)")
    for key in ("hidden_act", "hidden_activation"):
        if (cfg.get(key) or "silu") != "silu":
            raise UnsupportedCheckpoint(source, key, cfg[key], "only SiLU (SwiGLU) MLPs are built")
    if family != "qwen2" and cfg.get("attention_bias"):  # qwen2's q/k/v biases are unconditional
        raise UnsupportedCheckpoint(source, "attention_bias", True,
                                    "biases on all of q/k/v/o are not built (only Qwen2's q/k/v biases)")
    if cfg.get("mlp_bias"):
        raise UnsupportedCheckpoint(source, "mlp_bias", True, "MLP biases are not built")
    for key in _MOE_KEYS:
        if cfg.get(key):
            raise UnsupportedCheckpoint(source, key, cfg[key], "mixtures of experts are not built")
    for key in _SOFTCAP_KEYS:
        if cfg.get(key):
            raise UnsupportedCheckpoint(source, key, cfg[key], "logit soft-capping is not built")
    if cfg.get("attention_dropout"):
        raise UnsupportedCheckpoint(source, "attention_dropout", cfg["attention_dropout"],
                                    "attention dropout is not built (set it to 0.0 to train without)")


def args_from_hf_config(cfg: dict, source: str = "config.json") -> ModelArgs:
    family = cfg.get("model_type", "llama")
    if family not in FAMILIES:
        raise UnsupportedCheckpoint(source, "model_type", family,
                                    f"supported model types are {', '.join(FAMILIES)}")
    _refuse_unsupported(cfg, family, source)
    dim = _require(cfg, "hidden_size", source)
    n_heads = _require(cfg, "num_attention_heads", source)
    n_layers = _require(cfg, "num_hidden_layers", source)
    n_kv_heads = _get(cfg, family, "num_key_value_heads") or n_heads
    head_dim = _get(cfg, family, "head_dim")
    if head_dim is None and dim % n_heads:
        raise ValueError(f"{source}: hidden_size={dim} is not a multiple of num_attention_heads={n_heads}")
    if n_heads % n_kv_heads:
        raise ValueError(f"{source}: num_attention_heads={n_heads} is not a multiple of "
                         f"num_key_value_heads={n_kv_heads}")
    max_pos = int(_get(cfg, family, "max_position_embeddings") or _DEFAULTS[family]["max_position_embeddings"])
    _sliding_window_in_use(cfg, family, n_layers, max_pos, source)
    theta, scaling = _rope_from_config(cfg, max_pos, source)
    return ModelArgs(
        vocab_size=_require(cfg, "vocab_size", source),
        dim=dim,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        ffn_dim=_require(cfg, "intermediate_size", source),
        norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        rope_theta=theta,
        rope_scaling=scaling,
        max_seq_len=max_pos,
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        family=family,
        qkv_bias=family == "qwen2",
        qk_norm=family == "qwen3",
        decoupled_head_dim=head_dim if head_dim is not None and head_dim != dim // n_heads else None,
    )


def _family_fields(args: ModelArgs) -> dict:
    """The keys that tell transformers this family's switches are off where we build none."""
    if args.family == "llama":
        return {"attention_bias": False, "mlp_bias": False}
    if args.family == "mistral":
        return {"sliding_window": None}
    no_window = {"use_sliding_window": False, "sliding_window": None, "max_window_layers": args.n_layers}
    return no_window if args.family == "qwen2" else {"attention_bias": False, **no_window}


def hf_config_from_args(args: ModelArgs, bos_id: Optional[int], eos_id: Optional[int],
                        pad_id: Optional[int], dtype_name: str) -> dict:
    rope_parameters = {"rope_theta": args.rope_theta, "rope_type": "default"}
    rope_scaling = None
    if args.rope_scaling:
        rope_scaling = {"rope_type": "llama3", **args.rope_scaling}  # a dict without a type is llama3
        rope_parameters.update(rope_scaling)
    return {
        "architectures": [ARCHITECTURES[args.family]],
        "model_type": args.family,
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
        "attention_dropout": 0.0,
        **_family_fields(args),
        "tie_word_embeddings": args.tie_embeddings,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "pad_token_id": pad_id,
        "dtype": dtype_name,
        "torch_dtype": dtype_name,
    }


def read_config(path: Path) -> dict:
    file = Path(path) / "config.json"
    if not file.is_file():
        raise FileNotFoundError(f"no config.json in checkpoint directory {path}")
    try:
        return json.loads(file.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{file}: invalid JSON at line {err.lineno}: {err.msg}") from err
