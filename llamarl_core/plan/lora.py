"""What LoRA changes in a plan (`model.lora.rank > 0`): the weight sync's bytes per version and
the parameter counts the memory estimate reads. Pure arithmetic on the model's shapes.

Only the adapters travel (executors/adapter_sync.py): per target linear [out, in], A [r, in] and
B [out, r], so r·(in + out) values instead of out·in. The generator keeps a copy of each
target's base weight to merge every version exactly (generation/lora_merge.py).
"""
from __future__ import annotations

from llamarl_core.config.choices import DTYPE_BYTES
from llamarl_core.config.schema import LoraConfig
from llamarl_core.models.args import ModelArgs
from llamarl_core.models.lora import TARGET_PATHS


def target_shapes(m: ModelArgs, targets) -> dict[str, tuple[int, int]]:
    """`layers.<i>.attention.wq` → its weight's [out, in], for every target of every block."""
    shapes = m.param_shapes()
    return {f"layers.{i}.{TARGET_PATHS[t]}": shapes[f"layers.{i}.{TARGET_PATHS[t]}.weight"]
            for i in range(m.n_layers) for t in targets}


def adapter_params(m: ModelArgs, lora: LoraConfig) -> int:
    """Trainable parameters: r·(in + out) per target linear (0 without LoRA)."""
    if not lora.enabled:
        return 0
    return sum(lora.rank * (i + o) for o, i in target_shapes(m, lora.target_modules).values())


def target_params(m: ModelArgs, lora: LoraConfig) -> int:
    """The base weights of the target linears: what a LoRA generator keeps a copy of."""
    if not lora.enabled:
        return 0
    return sum(o * i for o, i in target_shapes(m, lora.target_modules).values())


def sync_bytes(m: ModelArgs, lora: LoraConfig, dtype: str, full_bytes: float) -> dict:
    """The weight sync one generator rank receives per version: `full_bytes` (every weight, as
    `memory.generator_weight_bytes` counts them) or, with LoRA, the adapters in `dtype` (the
    generators' dtype: DDMA converts on the way), which is what `sync/bytes` reports."""
    if not lora.enabled:
        return {"what": "full weights", "bytes_per_version": int(full_bytes), "full_bytes": int(full_bytes)}
    return {"what": f"LoRA adapters (rank {lora.rank}, {','.join(lora.target_modules)})",
            "bytes_per_version": adapter_params(m, lora) * DTYPE_BYTES[dtype], "full_bytes": int(full_bytes)}
