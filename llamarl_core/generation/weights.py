"""Routing a model's linears through other callables for a block (quantization's KL check).

The engine itself never patches the model (it runs its own projections, fused.py); this is
for measuring a quantized model's next-token distributions with the model's own forward.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable

from torch import nn


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
