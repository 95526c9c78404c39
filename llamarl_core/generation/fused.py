"""The engine's weights: merged QKV and gate/up projections, laid out for the fastest GEMM.

Per block the engine runs 4 matmuls instead of 7: `x @ Wqkv` (wq|wk|wv stacked on the output
axis), `x @ Wo`, `x @ W13` (gate|up) and `x @ W2`, each stored `[out, in]` (contiguous) on
every device. On CPU in float32 each runs by `cpu_gemm.linear`: MKL or oneDNN, whichever
runs that shape faster on this CPU (timed once per shape; the two trade places by CPU and
shape by up to 2x, cpu_gemm.py has the numbers). Until 2026-12 the CPU copies were stored
`[in, out]` and always run by oneDNN, as measured on an AVX-512 EPYC; on an AVX2 one that
ran `w1|w3` at half the speed of the better kernel.

Where the fused buffers live depends on who else uses the model:
  * **adopted** (a model nobody trains: no parameter requires grad, e.g. the generator role's):
    the fused buffers become the weights' storage. Each original parameter (`wq.weight`, ...)
    is re-pointed (`param.data = view`) at its slice of the fused buffer, so names, shapes
    and state_dict stay the same and a weight sync that writes `param.copy_(new)` into the
    original names lands in the fused buffer: no copy per call, nothing to refresh.
  * **copied** (a model being trained, e.g. the synchronous actor's): the fused buffers are
    copies, rebuilt at the start of every `generate()` call, so in-place updates by the
    optimizer are always seen.
  * **quantized** (`int8`/`fp8`): copies, rebuilt by `GenerationEngine.refresh_weights()`
    (only the projections it names as changed: a LoRA generator's targets).
    Stacking rows does not change per-output-channel scales, so a fused quantized
    projection equals the three separate ones.
If a parameter of an adopted model is later re-pointed by someone else (its storage no longer
the fused buffer), `current()` notices and adopts again. Biases (Qwen2's q/k/v) are stacked
the same way into one bias per fused projection, adopted or copied like the weights, and stay
in the model's dtype when the weights are quantized.

**In place** (the generator role): when every group's parameters already lie back to back in
one storage, in the engine's order (the DDMA slots are laid out so: `fused_param_groups`,
transport/ddma_plan.py), the projections are views of that storage in the `[out, in]` layout,
on any device: nothing is copied or concatenated, at adoption or after a sync (the swap
re-points the parameters into the other slot; `current()` notices and takes views there).
Biases are views the same way. The generator then holds exactly its DDMA slots
(docs/PLAN_MEMORY.md).
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import nn

from . import cpu_gemm
from .quant import QuantizedLinear


class Proj:
    """y = x @ W^T (+ b) for one (possibly fused) projection; `weight` is [out, in] (maybe a view).

    Forward hooks of a single-module projection still run (tensor parallelism all-reduces the
    row-parallel wo/w2 outputs in one, transport/tensor_parallel.py)."""

    def __init__(self, weight: torch.Tensor, module: Optional[nn.Module] = None,
                 bias: Optional[torch.Tensor] = None):
        self.weight = weight  # [out, in]
        self.bias = bias  # [out] or None
        self.module = module

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return _hooked(self.module, x, cpu_gemm.linear(x, self.weight, self.bias))


def _hooked(module: Optional[nn.Module], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    for hook in (module._forward_hooks.values() if module is not None else ()):
        out = hook(module, (x,), y)
        y = y if out is None else out
    return y


class _HookedQuantized:
    def __init__(self, quantized: QuantizedLinear, module: nn.Module):
        self.quantized, self.module = quantized, module
        self.q = quantized.q

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return _hooked(self.module, x, self.quantized(x))


# The projections a block runs: key → the modules (under `layers.<i>.`) stacked on the output axis.
BLOCK_PROJECTIONS = (("qkv", ("attention.wq", "attention.wk", "attention.wv")), ("wo", ("attention.wo",)),
                     ("w13", ("feed_forward.w1", "feed_forward.w3")), ("w2", ("feed_forward.w2",)))


def _groups(model: nn.Module) -> list[tuple[str, list[nn.Linear]]]:
    """(key, linears stacked on the output axis) for every projection the engine runs."""
    out = []
    for i, layer in enumerate(model.layers):
        out += [(f"{i}.{key}", [layer.get_submodule(m) for m in modules]) for key, modules in BLOCK_PROJECTIONS]
    if model.output.weight is not model.tok_embeddings.weight:
        out.append(("output", [model.output]))
    return out


def _stacked_bias(linears: list[nn.Linear]) -> Optional[torch.Tensor]:
    """A fresh [out] tensor of the linears' biases (all or none have one), or None."""
    if linears[0].bias is None:
        return None
    return torch.cat([lin.bias.detach() for lin in linears])


def fused_param_groups(names) -> list[list[str]]:
    """The parameter names the engine stacks into one projection, in its order (from names
    alone, so a trainer and a generator agree without a model): `layers.3.attention.wq.weight`,
    `...wk.weight`, `...wv.weight` (and the same for any other leaf, e.g. biases). A weight sync
    that lays each group out back to back lets the engine compute from it in place."""
    names, out = set(names), []
    for name in sorted(names):
        for _, modules in BLOCK_PROJECTIONS:
            head = f".{modules[0]}."
            if len(modules) > 1 and name.startswith("layers.") and head in name:
                prefix, leaf = name.split(head, 1)
                group = [f"{prefix}.{m}.{leaf}" for m in modules]
                if all(g in names for g in group):
                    out.append(group)
    return out


def _in_place(ws: list[torch.Tensor]) -> Optional[torch.Tensor]:
    """A [out_total, ...] view spanning the tensors (the linears' weights, or their biases) when
    they lie back to back, in this order, in one storage (a DDMA slot laid out in fused order);
    else None."""
    w0 = ws[0]
    at = w0.storage_offset()
    for w in ws:
        if (w.dim() != w0.dim() or not w.is_contiguous() or w.shape[1:] != w0.shape[1:] or w.dtype != w0.dtype
                or w.untyped_storage().data_ptr() != w0.untyped_storage().data_ptr() or w.storage_offset() != at):
            return None
        at += w.numel()
    rows = sum(w.shape[0] for w in ws)
    return w0.detach().new_empty(0).set_(w0.untyped_storage(), w0.storage_offset(), (rows, *w0.shape[1:]))


def _weight(lin: nn.Module) -> torch.Tensor:
    """What a linear computes with: its weight, or W + s·B@A for a LoRA layer being trained
    (models/lora.py; the synchronous actor's and the trainer's eval engines run merged)."""
    merged = getattr(lin, "merged_weight", None)
    return merged() if merged is not None else lin.weight.detach()


def _stacked(linears: list[nn.Linear]) -> torch.Tensor:
    """A fresh contiguous [out, in] tensor of the linears' weights stacked on the output axis."""
    return torch.cat([_weight(lin) for lin in linears], dim=0).contiguous()


class EngineWeights:
    """Callables per projection (`proj["0.qkv"](x)`), built by the rules in the docstring."""

    def __init__(self, model: nn.Module, quantization: str = "none"):
        self.model, self.quantization = model, quantization
        self.proj: dict[str, Callable] = {}
        self._aliases: list[tuple[torch.Tensor, int]] = []  # (param, data_ptr it must keep)
        self._built = False

    def adoptable(self) -> bool:
        return (self.quantization == "none" and not any(p.requires_grad for p in self.model.parameters())
                and not any(hasattr(m, "merged_weight") for m in self.model.modules()))  # LoRA: merged copies

    def current(self) -> dict[str, Callable]:
        """The projections to run now (fresh copies for a trained model, every call)."""
        if not self._built or self.quantization == "none":
            self.refresh()
        return self.proj

    def refresh(self, only: Optional[set[str]] = None) -> None:
        """Make the projections match the model's weights now: rebuild copies (quantized or
        trained model); for an adopted model nothing to do unless its storage was re-pointed.
        `only`: the projection keys (`0.qkv`, ...) whose weights changed since the last build,
        the others are kept (a LoRA merge rewrites its targets alone: generation/lora_merge.py)."""
        if self.quantization == "none" and self.adoptable():
            if not self._built or any(p.data_ptr() != ptr for p, ptr in self._aliases):
                self._adopt()
            return
        if not self._built:
            only = None
        if only is None:
            self.proj, self._aliases = {}, []
        quantized = self.quantization != "none"
        for key, linears in _groups(self.model):
            if only is not None and key not in only:
                continue
            single = linears[0] if len(linears) == 1 else None
            bias = _stacked_bias(linears)
            if quantized and key != "output":  # the output head stays full precision
                self.proj[key] = _HookedQuantized(
                    QuantizedLinear(_stacked(linears), self.quantization, bias), single)
            else:
                self.proj[key] = Proj(_stacked(linears), single, bias)
        self._built = True

    def _adopt(self) -> None:
        """Views of storage the parameters already share in fused order (in place), else
        re-point every projection's parameters at slices of one fused buffer."""
        self.proj, self._aliases = {}, []
        groups = _groups(self.model)
        with torch.no_grad():
            views = [_in_place([lin.weight for lin in linears]) for _, linears in groups]
            if all(v is not None for v in views):
                for (key, linears), view in zip(groups, views):
                    has_bias = linears[0].bias is not None
                    # a bias in place is a view too; one laid out elsewhere is copied (it is tiny)
                    bias = (_in_place([lin.bias for lin in linears]) if has_bias else None)
                    bias = _stacked_bias(linears) if has_bias and bias is None else bias
                    self.proj[key] = Proj(view, linears[0] if len(linears) == 1 else None, bias)
                    self._aliases += [(t, t.data_ptr()) for lin in linears
                                      for t in ((lin.weight, lin.bias) if has_bias else (lin.weight,))]
                self._built = True
                return
            for key, linears in groups:
                stacked = _stacked(linears)  # [out_total, in]
                bias = _stacked_bias(linears)  # [out_total] or None
                start = 0
                for lin in linears:
                    rows = lin.weight.shape[0]
                    lin.weight.data = stacked[start:start + rows]
                    self._aliases.append((lin.weight, lin.weight.data_ptr()))
                    if bias is not None:
                        lin.bias.data = bias[start:start + rows]
                        self._aliases.append((lin.bias, lin.bias.data_ptr()))
                    start += rows
                self.proj[key] = Proj(stacked, linears[0] if len(linears) == 1 else None, bias)
        self._built = True
