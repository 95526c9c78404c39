"""The engine's float32 CPU GEMM, y = x @ W^T + b: MKL or oneDNN, whichever runs a shape faster here.

Two kernels compute the same float32 product (max error vs float64 ~6e-7 for both):
MKL's sgemm (`F.linear`, what `transformers` and a training step call) and oneDNN's linear
(`torch.ops.mkldnn._linear_pointwise`, the op inductor emits). Which one is faster depends
on the CPU and on the shape, by up to 2x either way, so no fixed rule is right:
  * on an AVX-512 AMD EPYC, 1 thread, 64 rows, oneDNN ran the block projections at
    195-225 GFLOP/s against MKL's 80-98 (MKL does not take its AVX-512 path on AMD);
  * on an AVX2 AMD EPYC (SmolLM2-135M's shapes, 1 thread, 64 rows; 2026-12-02) MKL ran
    `wq|wk|wv` [960x576] and `wo` at 30 and 46 GFLOP/s against oneDNN's 18 and 27, while
    oneDNN ran `w1|w3` [3072x576] at 40 against 27 and the 49k-vocabulary head at 33 against
    20; oneDNN on a weight stored `[in, out]` (the engine's old fixed choice) ran `w1|w3` at
    15-21, half of the best, in both decode and prefill.
So the first call of each (rows bucket, in, out, bias, threads) times both kernels on its real
input and weight, alternating and best of 3 each (a shared machine's noise only slows a
sample), and every later call of that shape takes the faster. Rows are bucketed by powers of
two: decode batches shrink by one row at a time as rows end, prefill batches vary widely.
The cost is paid once per shape per process (~6 calls of it); products under
`MIN_TIMED_MACS` (the tests' tiny models) run by MKL untimed, so they stay bit-reproducible.

`LLAMARL_CPU_GEMM=mkl|onednn` pins the kernel (reproducing a run bit for bit across machines);
unset or `auto` times. Off the CPU, outside float32, with gradients, or where the op is missing
or disagrees with `F.linear` at start-up, it is `F.linear`.
"""
from __future__ import annotations

import os
import time
from typing import Callable, Optional

import torch
import torch.nn.functional as F

KERNELS = ("mkl", "onednn")
TIMING_ROUNDS = 3
MIN_TIMED_MACS = 1 << 20  # smaller products run by MKL untimed: microseconds either way
_choice: dict[tuple, str] = {}  # (rows bucket, in, out, bias, threads) -> kernel
_onednn_ok: Optional[bool] = None


def _onednn(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x.contiguous(), weight, bias, "none", [], "")


RUN: dict[str, Callable] = {"mkl": F.linear, "onednn": _onednn}


def onednn_linear_available() -> bool:
    """Whether oneDNN's float32 linear runs here and agrees with `F.linear` (checked once)."""
    global _onednn_ok
    if _onednn_ok is None:
        _onednn_ok = False
        if getattr(torch.ops.mkldnn, "_linear_pointwise", None) is not None and torch.backends.mkldnn.is_available():
            try:
                with torch.inference_mode():
                    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(0))
                    w = torch.randn(48, 32, generator=torch.Generator().manual_seed(1))
                    _onednn_ok = torch.allclose(_onednn(x, w, None), F.linear(x, w), rtol=1e-5, atol=1e-5)
            except RuntimeError:
                pass
    return _onednn_ok


def pinned() -> Optional[str]:
    """The kernel `LLAMARL_CPU_GEMM` pins, or None (time them)."""
    value = os.environ.get("LLAMARL_CPU_GEMM", "auto").strip().lower()
    if value in ("", "auto"):
        return None
    if value not in KERNELS:
        raise ValueError(f"LLAMARL_CPU_GEMM must be one of auto, {', '.join(KERNELS)}; got {value!r}")
    return value


def applies(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether the choice is made at all (else `F.linear`)."""
    return (weight.device.type == "cpu" and weight.dtype == torch.float32 and x.dtype == torch.float32
            and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))
            and onednn_linear_available())


def shape_key(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> tuple:
    rows = max(1, x.numel() // max(1, x.shape[-1]))
    return (1 << (rows - 1).bit_length(), weight.shape[1], weight.shape[0], bias is not None,
            torch.get_num_threads())


def _time_both(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> tuple[str, torch.Tensor]:
    """(the faster kernel, its output): the call returns what every later call of the shape will."""
    best, out = dict.fromkeys(RUN, float("inf")), {}
    order = [k for r in range(TIMING_ROUNDS) for k in (RUN if r % 2 == 0 else reversed(list(RUN)))]
    for name in order:
        start = time.perf_counter()
        out[name] = RUN[name](x, weight, bias)
        best[name] = min(best[name], time.perf_counter() - start)
    winner = min(best, key=best.get)
    return winner, out[winner]


def linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """x [..., in] @ weight[out, in]^T + bias, by the faster kernel for this shape here."""
    if not applies(x, weight):
        return F.linear(x, weight, bias)
    kernel = pinned()
    if kernel is None and x.numel() * weight.shape[0] < MIN_TIMED_MACS:
        kernel = "mkl"
    if kernel is None:
        key = shape_key(x, weight, bias)
        kernel = _choice.get(key)
        if kernel is None:
            kernel, y = _time_both(x, weight, bias)
            _choice[key] = kernel
            return y
    return RUN[kernel](x, weight, bias)


def choices() -> dict[tuple, str]:
    """What was chosen so far in this process (benches record it)."""
    return dict(_choice)
