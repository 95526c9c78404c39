"""Generator tensor parallelism, applied from outside a plain `Llama` (torchtitan's
`parallelize` idea, for inference): the model code never imports torch.distributed.

    x ─▶ norm ─▶ wq/wk/wv (column-parallel: this rank's heads) ─▶ attention on local heads
         ─▶ wo (row-parallel: partial sum) ─▶ all-reduce ─▶ + x
      ─▶ norm ─▶ w1/w3 (column-parallel: this rank's MLP columns) ─▶ silu·mul
         ─▶ w2 (row-parallel: partial sum) ─▶ all-reduce ─▶ + x

One all-reduce per sub-block (two per layer). A column-parallel bias keeps the rows of its
weight; Qwen3's q/k norms act on each head's own [head_dim] vector, so every rank holds them
whole. Embeddings, norms and the output head stay replicated, so every rank of a replica ends with the same logits (an all-reduce leaves the
same bytes on every rank) and samples the same token; `token_sync` broadcasts TP rank 0's
token anyway, because a single differing token would make the ranks' step counts differ and
the next all-reduce hang.

Weights stay plain tensors (sliced copies), not DTensors: the engine's fused copies
and its quantized copies read `module.weight` as an ordinary tensor, and decode-sized GEMMs
gain nothing from DTensor dispatch. Which slice a rank holds is `tp_layout.tp_slice`.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist
from torch import nn

from llamarl_core.models.tp_slices import ROW_PARALLEL, check_tp, tp_slice
from llamarl_core.transport.tp_layout import take


def shard_model_(model: nn.Module, tp_rank: int, tp_size: int, group) -> nn.Module:
    """Keep only TP rank `tp_rank`'s slice of every column/row-parallel linear, in place, and
    all-reduce the row-parallel outputs over `group`. Returns the model."""
    args = model.args
    check_tp(args, tp_size)
    if tp_size == 1:
        return model
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear):
            continue
        w = module.weight
        s = tp_slice(f"{name}.weight", tuple(w.shape), args, tp_rank, tp_size)
        if s.size == w.shape[s.dim]:
            continue  # replicated
        module.weight = nn.Parameter(take(w.detach(), s).clone(), requires_grad=w.requires_grad)
        if module.bias is not None:  # column-parallel only (Qwen2's q/k/v): rows follow the weight's
            b = module.bias
            sb = tp_slice(f"{name}.bias", tuple(b.shape), args, tp_rank, tp_size)
            module.bias = nn.Parameter(take(b.detach(), sb).clone(), requires_grad=b.requires_grad)
        if s.dim == 0:
            module.out_features = s.size
        else:
            module.in_features = s.size
        if name.endswith(ROW_PARALLEL):
            module.register_forward_hook(_all_reduce_output(group))
    model.tp_rank, model.tp_size = tp_rank, tp_size  # for logs; the model itself never reads them
    return model


def _all_reduce_output(group) -> Callable:
    def hook(module, inputs, output: torch.Tensor) -> None:
        dist.all_reduce(output, group=group)  # in place: the partial sums become the full output
    return hook


def make_token_sync(group, src_global_rank: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """A `GenerationEngine(token_sync=...)` callable: TP rank 0's tokens on every rank."""
    def sync(tokens: torch.Tensor) -> torch.Tensor:
        tokens = tokens.contiguous()
        dist.broadcast(tokens, src=src_global_rank, group=group)
        return tokens
    return sync


def broadcast_flag(flag: bool, src_global_rank: int, group) -> bool:
    """`flag` as decided on rank `src_global_rank`, on every rank of `group` (a CPU tensor:
    gloo carries it even where the group's tensors otherwise go over NCCL)."""
    t = torch.tensor([int(flag)])
    dist.broadcast(t, src=src_global_rank, group=group)
    return bool(t.item())


def new_replica_groups(generator_ranks: list[int], tp_size: int):
    """One process group per generator replica (TP ranks consecutive: replica i = ranks
    [i·tp, (i+1)·tp) of the role). `new_group` is collective over the whole world, so every
    rank calls this, in the same order; returns this rank's replica group (None elsewhere)."""
    if len(generator_ranks) % tp_size:
        raise ValueError(f"{len(generator_ranks)} generator ranks are not divisible by tp={tp_size}")
    me, mine = dist.get_rank(), None
    for i in range(0, len(generator_ranks), tp_size):
        ranks = generator_ranks[i:i + tp_size]
        group = dist.new_group(ranks)
        if me in ranks:
            mine = group
    return mine
