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
        # s applied on the r-wide intermediate, and B's product accumulated into y by one addmm:
        # no [..., out]-wide product or scaled copy (a LoRA step measured 14.1 -> 12.x s on SmolLM2)
        h = F.linear(self.dropout(x), a) * self.scale  # [..., r]
        out = torch.addmm(y.reshape(-1, y.shape[-1]), h.reshape(-1, h.shape[-1]), b.t())  # [N, out]
        return out.view(y.shape)

    def merged_weight(self) -> torch.Tensor:
        """W + s · B @ A (detached, `merged`; W alone while the adapters are off)."""
        w = self.weight.detach()
        if not self.adapters_enabled:
            return w
        return merged(w, self.lora_A.weight.detach(), self.lora_B.weight.detach(), self.scale)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, rank={self.rank}, scale={self.scale:g}"


def init_a(shape, generator: torch.Generator | None = None) -> torch.Tensor:
    """A fresh [r, in] float32 A, as `nn.Linear.reset_parameters` draws a weight (PEFT's init)."""
    bound = 1.0 / math.sqrt(shape[1])  # kaiming_uniform_(a=√5) on fan_in = in
    return torch.empty(shape).uniform_(-bound, bound, generator=generator)


def merged(w: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scale: float,
           out: torch.Tensor | None = None) -> torch.Tensor:
    """W + s · B @ A ([out, in] + s · [out, r] @ [r, in]), in the weight's dtype: the one merge
    rule (the trainer's merged engine weights and checkpoints, the generator's merge of each
    version, `llamarl export --merged`), so all of them agree bit for bit. One `addmm` in float32
    (at least; a 16-bit weight is merged in float32 and rounded once); `out`: written in place."""
    work = torch.promote_types(w.dtype, torch.float32)
    if w.dtype == a.dtype == b.dtype == work:
        return torch.addmm(w, b, a, alpha=scale, **({"out": out} if out is not None else {}))
    result = torch.addmm(w.to(work), b.to(work), a.to(work), alpha=scale).to(w.dtype)
    return out.copy_(result) if out is not None else result


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


def trainable_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The parameters the optimizer steps: all of them, or with LoRA only the adapters (the base
    is frozen by `apply_lora`), so Adam keeps no state for the base."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    return trainable or list(model.parameters())  # a model frozen by its caller (tests): as before LoRA


def hold_base_in(model: nn.Module, dtype: torch.dtype) -> nn.Module:
    """The frozen base in `dtype` (the trainer's compute dtype), adapters left as they are (fp32):
    a frozen weight is never stepped, so it needs no fp32 master copy. Works on the meta device."""
    for name, p in model.named_parameters():
        if not is_adapter(name) and not p.requires_grad:
            p.data = p.data.to(dtype)
    return model


def modules_in_init_order(model: nn.Module, targets) -> list[LoraLinear]:
    """The `LoraLinear`s in the order `apply_lora` draws their A (blocks, then `targets` as given):
    a later init (after FSDP2 materialises a meta model) draws the same A from the same seed."""
    return [layer.get_submodule(TARGET_PATHS[t]) for layer in model.layers for t in targets]


def lora_settings(model: nn.Module) -> dict | None:
    """{"rank", "alpha", "dropout", "target_modules"} of a LoRA model (what a step checkpoint's
    state.json records, so an export can tell an adapter-only checkpoint), None without LoRA."""
    found = list(lora_modules(model))
    if not found:
        return None
    m = found[0][1]
    leaves = {name.rsplit(".", 1)[-1] for name, _ in found}
    p = m.dropout.p if isinstance(m.dropout, nn.Dropout) else 0.0
    return {"rank": m.rank, "alpha": m.scale * m.rank, "dropout": p,
            "target_modules": [t for t in TARGET_PATHS if t in leaves]}


def merge_adapters(tensors, scales: dict[str, float]) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) in parameter order -> the same without adapter names, each LoRA target's
    weight replaced by W + s·B@A (float32 at least): a plain Hugging Face checkpoint. Streams:
    a target's weight (and bias) is held only until its lora_A and lora_B, which follow it in
    parameter order, arrive. `scales`: target module name -> s (`lora_scales`)."""
    held: list[tuple[str, torch.Tensor]] = []
    a = None
    for name, t in tensors:
        if name.endswith("lora_A.weight"):
            a = t
            continue
        if name.endswith("lora_B.weight"):
            target = adapter_target(name)
            w_name, w = held[0]
            assert w_name == f"{target}.weight", (w_name, name)
            work = torch.promote_types(w.dtype, torch.float32)
            yield w_name, merged(w.to(work), a, t, scales[target])
            yield from held[1:]
            held, a = [], None
            continue
        module = name.rsplit(".", 1)[0]
        if held or (module in scales and name.endswith(".weight")):
            held.append((name, t))  # a target's weight (and the bias after it) wait for B
            continue
        yield name, t
    if held:
        raise ValueError(f"merge_adapters: {held[0][0]} had no adapters after it")


def lora_scales(model: nn.Module) -> dict[str, float]:
    """Target module name -> its scale s, for `merge_adapters` ({} without LoRA: nothing merged)."""
    return {name: m.scale for name, m in lora_modules(model)}


@torch.no_grad()
def copy_adapters(model: nn.Module, tensors: dict[str, torch.Tensor]) -> None:
    """Whole adapter tensors by name (`...wq.lora_A.weight`) into an unsharded LoRA model."""
    params = dict(model.named_parameters())
    for name, t in tensors.items():
        params[name].copy_(t)
