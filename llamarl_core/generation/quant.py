"""Weight-only quantization for generation: int8 (CPU) and fp8 e4m3 (CUDA).

Both keep one scale per output channel: w ~= q * scale[:, None]. The quantized copies live
in the engine (fused.py stacks QKV and gate/up before quantizing, which leaves every row's
scale unchanged), never in the model, so a trainer sharing the module never sees them;
in-place weight swaps are picked up by `GenerationEngine.refresh_weights()`.
The transformer blocks' linear weights are quantized; their biases (Qwen2's q/k/v), the norms,
the embedding and the output head stay full precision.

Measured on 2 CPU cores (torch 2.13): a float32 GEMM at batch 64 is compute-bound, so int8
only saves memory (4x) and costs time (the dequantize-then-matmul path is ~1.2x slower per
layer; `aten._weight_int8pack_mm` is ~50x slower for float32 inputs). fp8 uses
`torch._scaled_mm` on GPUs that support it and dequantizes otherwise (CPU emulation, used to
measure its accuracy).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .weights import attached

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0  # largest finite float8_e4m3fn
SCALE_SUFFIX = "#scale"


def scale_name(name: str) -> str:
    """The key of an fp8 tensor's per-row scales next to it (the DDMA receiver's ``params``)."""
    return name + SCALE_SUFFIX


class QuantizedLinear:
    """Callable replacing `nn.Linear.forward`: y = (x @ dequant(q).T) + bias (bias unquantized)."""

    def __init__(self, weight: torch.Tensor, kind: str, bias: torch.Tensor | None = None):
        self.bias = None if bias is None else bias.detach().clone()
        w = weight.detach().float()
        amax = w.abs().amax(dim=1).clamp(min=1e-12)  # [out]
        self.kind, self.out_dtype = kind, weight.dtype
        if kind == "int8":
            self.scale = (amax / 127.0).to(weight.dtype)
            self.q = torch.round(w / (amax / 127.0)[:, None]).clamp(-127, 127).to(torch.int8)
            self.q_t = self.q.t().contiguous()  # [in, out]: the fast CPU GEMM layout (weights.py)
        elif kind == "fp8":
            scale32 = amax / FP8_MAX
            self.scale = scale32
            self.q = (w / scale32[:, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
            self.use_scaled_mm = weight.is_cuda and _scaled_mm_ok(self.q)
        else:
            raise ValueError(f"unknown quantization {kind!r}; use 'none', 'int8' or 'fp8'")

    def dequantized(self, dtype: torch.dtype) -> torch.Tensor:
        return self.q.to(dtype) * self.scale.to(dtype)[:, None]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        y = self._matmul(x)
        return y if self.bias is None else y.add_(self.bias.to(y.dtype))

    def _matmul(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "fp8" and self.use_scaled_mm:
            return _fp8_scaled_mm(x, self.q, self.scale)
        # Dequantize into the GEMM: (x @ q^T) * scale == x @ (q * scale)^T, one column per channel.
        if self.kind == "int8":
            return torch.matmul(x, self.q_t.to(x.dtype)) * self.scale.to(x.dtype)
        return F.linear(x, self.q.to(x.dtype)) * self.scale.to(x.dtype)


def _scaled_mm_ok(q: torch.Tensor) -> bool:
    major, _ = torch.cuda.get_device_capability(q.device)
    return hasattr(torch, "_scaled_mm") and major >= 9 and q.shape[0] % 16 == 0 and q.shape[1] % 16 == 0


def _fp8_scaled_mm(x: torch.Tensor, q: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    """Row-wise scaled fp8 GEMM: activations quantized per token on the fly."""
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])
    x_scale = (x2.abs().amax(dim=1, keepdim=True).float() / FP8_MAX).clamp(min=1e-12)  # [M, 1]
    xq = (x2.float() / x_scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    # Row-wise scaling produces bf16 only (any input dtype is cast back below).
    y = torch._scaled_mm(xq, q.t(), scale_a=x_scale, scale_b=w_scale[None, :].float(),
                         out_dtype=torch.bfloat16)
    return y.to(x.dtype).reshape(*shape[:-1], -1)


def quantize_model(model: nn.Module, kind: str) -> dict[str, QuantizedLinear]:
    """Quantized copies of every linear inside the transformer blocks, keyed by module name."""
    return {name: QuantizedLinear(module.weight, kind, module.bias) for name, module in model.named_modules()
            if isinstance(module, nn.Linear) and name.startswith("layers.")}


def token_kl(logits_full: torch.Tensor, logits_quant: torch.Tensor,
             mask: torch.Tensor | None = None) -> float:
    """Mean over positions (those where `mask` [B, T] is True) of KL(p_full || p_quant) between
    the next-token distributions softmax(logits [B, T, V]): the token-level KL to full precision."""
    logp_full = torch.log_softmax(logits_full.float(), dim=-1)  # [B, T, V]
    logp_quant = torch.log_softmax(logits_quant.float(), dim=-1)
    kl = (logp_full.exp() * (logp_full - logp_quant)).sum(-1)  # [B, T]
    return float(kl.mean() if mask is None else kl[mask].mean())


@torch.inference_mode()
def next_token_kl(model: nn.Module, quantized: dict[str, QuantizedLinear],
                  input_ids: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    """`token_kl` of the model with and without its quantized linears, on input_ids [B, T]
    (all positions, or those where `mask` [B, T] is True)."""
    logits_full = model(input_ids)  # [B, T, V]
    with attached(model, quantized):
        logits_quant = model(input_ids)
    return token_kl(logits_full, logits_quant, mask)
