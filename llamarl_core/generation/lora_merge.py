"""A LoRA generator's weights: its own base, plus the adapters merged in, version by version.

With `model.lora.rank > 0` only the adapters travel (executors/adapter_sync.py). The generator
builds the frozen base itself (the checkpoint, or the preset under run.seed, as the trainer
does) and keeps a copy of the base weight of every LoRA target linear; each adopted version is
then merged *from that copy*: W ← W_base + s·B@A (`models.lora.merged`), written in place
into the linear's `.weight`, which the engine's fused buffers alias (generation/fused.py:
adopted storage). Merging from the copy, never from the previous merged weight, keeps every
version exact: no rounding drifts in over versions, and B = 0 gives back the base bit for bit.

Why merged and not a LoRA layer in the engine: one GEMM per projection, as without LoRA, and a
quantized engine re-quantizes only the projections a merge rewrote (`changed_projections`).
Costs the base copy of the targets (`base_copy_bytes`, shown by `llamarl plan`).
"""
from __future__ import annotations

import torch
from torch import nn

from llamarl_core.models.lora import TARGET_PATHS, merged

# our projection name -> the engine's projection key suffix (fused.BLOCK_PROJECTIONS)
ENGINE_PROJECTION = {"wq": "qkv", "wk": "qkv", "wv": "qkv", "wo": "wo", "w1": "w13", "w3": "w13", "w2": "w2"}
NamedShapes = dict[str, tuple[tuple[int, ...], torch.dtype]]


def target_linears(model: nn.Module, targets) -> dict[str, nn.Linear]:
    """`layers.<i>.attention.wq` → that linear, for every target of every block (a plain model)."""
    return {f"layers.{i}.{TARGET_PATHS[t]}": layer.get_submodule(TARGET_PATHS[t])
            for i, layer in enumerate(model.layers) for t in targets}


def adapter_shapes(model: nn.Module, rank: int, targets, dtype: torch.dtype) -> NamedShapes:
    """The trainer's adapter parameters (names and full shapes) for a plain `model`: what the
    trainer's `apply_lora` adds, `<target>.lora_A.weight` [r, in] and `.lora_B.weight` [out, r]."""
    out: NamedShapes = {}
    for path, lin in target_linears(model, targets).items():
        out[f"{path}.lora_A.weight"] = ((rank, lin.in_features), dtype)
        out[f"{path}.lora_B.weight"] = ((lin.out_features, rank), dtype)
    return out


def changed_projections(model: nn.Module, targets) -> set[str]:
    """The engine projections (`0.qkv`, `3.w13`, ...) a merge rewrites: a quantized engine
    rebuilds only these after a sync."""
    return {f"{i}.{ENGINE_PROJECTION[t]}" for i in range(len(model.layers)) for t in targets}


def base_copy_bytes(model: nn.Module, targets) -> int:
    return sum(lin.weight.numel() * lin.weight.element_size() for lin in target_linears(model, targets).values())


class LoraMerge:
    """Keeps the base of every target linear of `model` and writes W_base + s·B@A into it."""

    def __init__(self, model: nn.Module, targets, scale: float):
        self.scale = scale
        self.linears = target_linears(model, targets)
        self.base = {path: lin.weight.detach().clone() for path, lin in self.linears.items()}

    def apply(self, adapters: dict[str, torch.Tensor]) -> None:
        """`adapters`: `<target>.lora_A.weight` / `.lora_B.weight` of every target (any dtype)."""
        with torch.no_grad():
            for path, lin in self.linears.items():  # one addmm per target, from the base, into the weight
                merged(self.base[path], adapters[f"{path}.lora_A.weight"], adapters[f"{path}.lora_B.weight"],
                       self.scale, out=lin.weight)
