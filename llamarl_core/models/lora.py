"""LoRA on the policy (Hu et al. 2021, arXiv 2106.09685): y = x Wᵀ + b + s · drop(x) Aᵀ Bᵀ.

W (and b) frozen, A [r, in] and B [out, r] trained, s = alpha / r (`model.lora`, config/schema.py).
Initialised as PEFT does: A like an `nn.Linear` (Kaiming-uniform, a = √5), B zeros, so step 0 is
the base model exactly.

Why our own layer and not `peft.tuners.lora.Linear`: PEFT's layer moves the base weight to
`wq.base_layer.weight`, and the weight sync, the engine's fused projections, TP slices, FSDP's
sharded loading and the checkpoints all address weights by their names. `LoraLinear` keeps
`wq.weight` / `wq.bias` where they were and adds `wq.lora_A.weight` / `wq.lora_B.weight`, the
same leaves PEFT saves (`adapter_model.safetensors`), so PEFT's files map onto ours by the
module-name mapping alone (models/peft_io.py). Its arithmetic is checked against PEFT's on the
same weights (tests/unit/test_lora_peft_io.py).

Pure model code: no torch.distributed. The reference policy of a LoRA run is this module with
its adapters switched off (`adapters_disabled`): no second copy of the model.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from llamarl_core.config.choices import LORA_TARGETS

# our projection name → its path under `layers.<i>.`
TARGET_PATHS = {"wq": "attention.wq", "wk": "attention.wk", "wv": "attention.wv", "wo": "attention.wo",
                "w1": "feed_forward.w1", "w2": "feed_forward.w2", "w3": "feed_forward.w3"}
assert tuple(TARGET_PATHS) == LORA_TARGETS
ADAPTER_LEAVES = ("lora_A.weight", "lora_B.weight")


class LoraLinear(nn.Module):
    """A linear layer plus a low-rank update; `weight`/`bias` are the wrapped layer's own Parameters."""

    def __init__(self, base: nn.Linear, rank: int, scale: float, dropout: float = 0.0):
        super().__init__()
        self.in_features, self.out_features = base.in_features, base.out_features
        self.weight = base.weight
        self.bias = base.bias
        self.rank, self.scale = rank, scale
        kw = {"device": base.weight.device, "dtype": base.weight.dtype}
        self.lora_A = nn.Linear(self.in_features, rank, bias=False, **kw)
        self.lora_B = nn.Linear(rank, self.out_features, bias=False, **kw)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.adapters_enabled = True
        if base.weight.device.type != "meta":
            self.reset_adapters()

    def reset_adapters(self, generator: torch.Generator | None = None) -> None:
        """PEFT's init: A as `nn.Linear` initialises a weight (Kaiming-uniform, a = √5), B = 0."""
        with torch.no_grad():
            self.lora_A.weight.copy_(init_a(self.lora_A.weight.shape, generator))
            self.lora_B.weight.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.weight, self.bias)  # [..., out]
        if not self.adapters_enabled:
            return y
        a = self.lora_A.weight.to(x.dtype)
        b = self.lora_B.weight.to(x.dtype)
        return y + F.linear(F.linear(self.dropout(x), a), b) * self.scale  # [..., r] -> [..., out]

    def delta(self) -> torch.Tensor:
        """s · B @ A, [out, in], in the weight's dtype (detached)."""
        return merged_delta(self.lora_A.weight.detach(), self.lora_B.weight.detach(), self.scale,
                            self.weight.dtype)

    def merged_weight(self) -> torch.Tensor:
        """W + s · B @ A (detached; W alone while the adapters are off)."""
        w = self.weight.detach()
        return w + self.delta() if self.adapters_enabled else w

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, rank={self.rank}, scale={self.scale:g}"


def init_a(shape, generator: torch.Generator | None = None) -> torch.Tensor:
    """A fresh [r, in] float32 A, as `nn.Linear.reset_parameters` draws a weight (PEFT's init)."""
    bound = 1.0 / math.sqrt(shape[1])  # kaiming_uniform_(a=√5) on fan_in = in
    return torch.empty(shape).uniform_(-bound, bound, generator=generator)


def merged_delta(a: torch.Tensor, b: torch.Tensor, scale: float, dtype: torch.dtype) -> torch.Tensor:
    """s · B @ A ([out, r] @ [r, in] -> [out, in]), computed in float32 at least, then `dtype`."""
    work = torch.promote_types(a.dtype, torch.float32)
    return (b.to(work) @ a.to(work)).mul_(scale).to(dtype)


def apply_lora(model: nn.Module, rank: int, scale: float, targets, dropout: float = 0.0,
               seed: int | None = None) -> nn.Module:
    """Wrap every `targets` projection of every block in a `LoraLinear` (in place) and freeze all
    but the adapters. `seed`: the A init's generator (every rank draws the same A)."""
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    for layer in model.layers:
        for t in targets:
            parent_path, leaf = TARGET_PATHS[t].split(".")
            parent = layer.get_submodule(parent_path)
            lora = LoraLinear(getattr(parent, leaf), rank, scale, dropout)
            if generator is not None and lora.weight.device.type != "meta":
                lora.reset_adapters(generator)
            setattr(parent, leaf, lora)
    for name, p in model.named_parameters():
        p.requires_grad_(is_adapter(name))
    return model


def lora_modules(model: nn.Module) -> Iterator[tuple[str, LoraLinear]]:
    for name, m in model.named_modules():
        if isinstance(m, LoraLinear):
            yield name, m


def has_lora(model: nn.Module) -> bool:
    return any(True for _ in lora_modules(model))


def is_adapter(name: str) -> bool:
    """Whether a parameter name is an adapter's (`...wq.lora_A.weight`, `...wq.lora_B.weight`)."""
    return name.endswith(ADAPTER_LEAVES)


def adapter_target(name: str) -> str:
    """`layers.0.attention.wq.lora_A.weight` -> `layers.0.attention.wq`."""
    return name.rsplit(".", 2)[0]


@contextmanager
def adapters_disabled(model: nn.Module):
    """The base model for the block's duration (the KL reference of a LoRA run)."""
    modules = [m for _, m in lora_modules(model)]
    before = [m.adapters_enabled for m in modules]
    try:
        for m in modules:
            m.adapters_enabled = False
        yield model
    finally:
        for m, on in zip(modules, before):
            m.adapters_enabled = on
