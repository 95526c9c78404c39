"""TP slices as tensors: views of the full weights a generator tensor-parallel rank holds.

The slice arithmetic (which rows or columns, `tp_slice`) lives in models/tp_slices.py, below
the simulator, so the simulator and the weight sync count the same bytes.
"""
from __future__ import annotations

import torch

from llamarl_core.models.args import ModelArgs
from llamarl_core.models.tp_slices import TPSlice, tp_slice


def take(full: torch.Tensor, s: TPSlice) -> torch.Tensor:
    """A view of `full` restricted to slice `s` (no copy)."""
    return full.narrow(s.dim, s.start, s.size)


def shard_state(full: dict[str, torch.Tensor], args: ModelArgs, tp_rank: int,
                tp_size: int) -> dict[str, torch.Tensor]:
    """Views of the full state dict that TP rank `tp_rank` holds (same names)."""
    return {n: take(t, tp_slice(n, tuple(t.shape), args, tp_rank, tp_size)) for n, t in full.items()}
