"""fp8 on the wire, generator side: the engine computes from the fp8 weights and scales that arrived.

When `resources.generator.quantization=fp8`, the DDMA plan (executors/weights.py) sends the
engine's quantized linears (every block's wq, wk, wv, wo, w1, w2, w3) as float8_e4m3fn with
one float32 scale per output row, quantized by the trainer exactly as the engine would
(transport/ddma_plan.py `fp8_rows`). The generator receives them into fp8/scale tensors of its
own (`wire_params`, re-pointed at each adopted slot like any DDMA parameter); `bind` makes the
engine's `refresh_weights()` (called after every adoption, also mid-chunk by the scheduler)
`install` them: the engine's fused projections built from them (qkv and gate|up stacked on the output axis,
as generation/fused.py stacks them: per-row scales make stacking exact). The engine never
re-quantizes: its weights equal quantize(trainer weights) exactly, at half the bf16 bytes.

The generator's full-precision copies of those linears are released (`release_full_precision`:
the memory plan counts one byte per quantized weight, and 405B's bf16 block weights would not
fit a TP-8 GPU), so the full-precision side of `generator/quant_kl` (generation/quant_probe.py)
no longer exists there: the probe is off on the fp8 wire.
"""
from __future__ import annotations

import torch

from llamarl_core.generation.fused import Proj, _groups, _HookedQuantized, _stacked, _stacked_bias
from llamarl_core.generation.quant import FP8_DTYPE, QuantizedLinear, _scaled_mm_ok, scale_name
from llamarl_core.models.tp_slices import is_block_linear


def engine_quantizes(name: str) -> bool:
    """Whether the engine runs parameter `name` quantized: every block linear (generation/fused.py
    quantizes qkv, wo, gate|up and w2; the output head stays full precision)."""
    return is_block_linear(name)


def wire_params(params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The tensors the DDMA receiver fills: fp8 + float32 scales for the engine's quantized
    linears, the model's own parameters for everything else (embeddings, norms, head)."""
    out = dict(params)
    for name, p in params.items():
        if engine_quantizes(name):
            out[name] = torch.zeros(p.shape, dtype=FP8_DTYPE, device=p.device)
            out[scale_name(name)] = torch.zeros(p.shape[0], dtype=torch.float32, device=p.device)
    return out


def release_full_precision(model: torch.nn.Module) -> None:
    """Free the storage of the model's quantized linears (their values arrive as fp8): each
    becomes one zero broadcast to its shape, so shape, dtype and device stay what the engine
    reads (it splits fused outputs by the linears' shapes)."""
    for name, p in model.named_parameters():
        if engine_quantizes(name):
            p.data = torch.zeros((), dtype=p.dtype, device=p.device).expand(p.shape)


def _quantized(q: torch.Tensor, scale: torch.Tensor, out_dtype: torch.dtype,
               bias: torch.Tensor | None = None) -> QuantizedLinear:
    """A QuantizedLinear holding (q, scale) as they arrived (its constructor would quantize), and
    the full-precision bias (Qwen2's q/k/v biases travel as ordinary parameters)."""
    ql = QuantizedLinear.__new__(QuantizedLinear)
    ql.kind, ql.out_dtype, ql.q, ql.scale, ql.bias = "fp8", out_dtype, q, scale, bias
    ql.use_scaled_mm = q.is_cuda and _scaled_mm_ok(q)
    return ql


def install(engine, model: torch.nn.Module, received: dict[str, torch.Tensor]) -> None:
    """Make `engine`'s quantized projections the fp8 weights in `received` (after each adoption)."""
    names = {id(m.weight): n + ".weight" for n, m in model.named_modules()
             if isinstance(m, torch.nn.Linear)}
    weights = engine.weights
    for key, linears in _groups(model):
        single = linears[0] if len(linears) == 1 else None
        if key == "output":  # full precision, a copy of the head the receiver just re-pointed
            weights.proj[key] = Proj(_stacked(linears), single)
            continue
        bias = _stacked_bias(linears)
        keys = [names[id(lin.weight)] for lin in linears]
        q = torch.cat([received[k] for k in keys]) if len(keys) > 1 else received[keys[0]]
        scale = torch.cat([received[scale_name(k)] for k in keys]) if len(keys) > 1 else received[scale_name(keys[0])]
        weights.proj[key] = _HookedQuantized(_quantized(q, scale, linears[0].weight.dtype, bias), single)
    weights._built = True  # `current()` now returns these; nothing is re-quantized
    engine.proj = weights.proj


def bind(engine, model: torch.nn.Module, received: dict[str, torch.Tensor]) -> None:
    """From now on `engine.refresh_weights()` installs `received` instead of re-quantizing the
    model's (stale) full-precision linears."""
    engine.refresh_weights = lambda: install(engine, model, received)
