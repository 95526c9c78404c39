"""A model on the meta device, built without running its parameter init.

On the meta device an init (`nn.init.normal_` and the like) computes nothing, yet torch runs it
through its Python meta kernels, whose first call imports torch._dynamo and sympy: ~2.7 CPU-s
in a process that never compiles (a generator, whose weights all arrive over the weight sync;
the controller reading a checkpoint's shapes). A meta model is shapes only, so `meta_device()`
is `with torch.device("meta")` with the `torch.nn.init` functions returning their tensor as
it is for its duration (as transformers' `no_init_weights` does). The patch is process-wide
while it lasts: build meta models from the thread that builds the process's models.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch.nn import init

_INITS = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_", "dirac_",
          "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_", "sparse_")


def _untouched(tensor, *args, **kwargs):
    return tensor


@contextlib.contextmanager
def meta_device() -> Iterator[None]:
    """Modules built inside get meta parameters and no init (there is nothing to initialise)."""
    saved = {name: getattr(init, name) for name in _INITS}
    try:
        for name in _INITS:
            setattr(init, name, _untouched)
        with torch.device("meta"):
            yield
    finally:
        for name, fn in saved.items():
            setattr(init, name, fn)
