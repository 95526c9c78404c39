"""Per-call weight views for generation: routing the model's linears through engine-owned copies.

On CPU, `x @ W_t` with W_t = W.T stored contiguously ([in, out]) runs ~25% faster than
`F.linear(x, W)` for decode-sized batches (measured: 5 Llama-20M projections at batch 64,
1 thread: 1.84 ms vs 2.44 ms), because MKL need not repack a transposed operand on every
call. The engine therefore takes a transposed snapshot of every linear weight at the start of
each `generate()` call and drops it at the end: weights are re-read every call, so the
runtime's in-place swaps between calls are always seen and nothing can go stale. The snapshot
costs one pass over the weights per call (about one decode step) and, for the duration of the
call, one extra copy of the weights in memory; on CUDA (where cuBLAS has no such penalty) no
snapshot is taken.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable

import torch
from torch import nn


class TransposedLinear:
    """Callable replacing `nn.Linear.forward` (no bias): y = x @ W_t."""

    def __init__(self, weight: torch.Tensor):
        self.weight_t = weight.detach().t().contiguous()  # [in, out]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(x, self.weight_t)


def transposed_snapshot(model: nn.Module, skip: set[str] = frozenset()) -> dict[str, TransposedLinear]:
    return {name: TransposedLinear(module.weight) for name, module in model.named_modules()
            if isinstance(module, nn.Linear) and name not in skip}


@contextmanager
def attached(model: nn.Module, overrides: dict[str, Callable]):
    """Route the named modules' forward through the given callables for the block's duration.

    The override is an instance attribute shadowing `forward`, removed on exit, so the model
    (and its state_dict) is untouched outside the block.
    """
    modules = dict(model.named_modules())
    try:
        for name, fn in overrides.items():
            modules[name].forward = fn
        yield model
    finally:
        for name in overrides:
            modules[name].__dict__.pop("forward", None)
