"""DDMA transfer plan: which trainer rank sends which block of which parameter to whom.

LlamaRL §4.3: with FSDP each trainer rank owns a dim-0 shard of every parameter, and a
generator TP rank needs a row or column slice of it. Rather than gathering the model
anywhere, the plan intersects the two, parameter by parameter, into *pieces*
``(trainer rank, generator rank, rows of the trainer's shard, columns, rows of the
generator's tensor)``; every trainer rank then sends only what it owns, all in
parallel, and every generator rank receives only its slice, straight into place.

Shapes are read as 2-D ``[dim0, rest]`` (a vector is ``[n, 1]``); a generator slice
along dim 1 is only allowed for matrices. A destination block always spans its
generator tensor's full width, so it is a contiguous run of rows there and can be
received or written in place; the source block is contiguous only when it spans the
trainer's full width (dim-0 TP slices, replicated tensors).

Pure: no torch.distributed. Sender and receivers derive the same plan from the same
``named_shapes`` and sizes, so no offsets travel.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from llamarl_core.models.tp_slices import fsdp_rows  # noqa: F401 (re-exported: the plan's row rule)

ALIGN_BYTES = 64
NamedShapes = dict[str, tuple[tuple[int, ...], torch.dtype]]
# (name, full shape, tp_rank, tp_size) -> (dim, start, length) of that rank's slice; None = whole tensor
SliceFn = Callable[[str, tuple[int, ...], int, int], Optional[tuple[int, int, int]]]

# Megatron-style split of the Llama blocks: column-parallel (dim 0) for the input projections,
# the embedding and the output head; row-parallel (dim 1) for the output projections.
_DIM0 = ("attention.wq.weight", "attention.wk.weight", "attention.wv.weight", "feed_forward.w1.weight",
         "feed_forward.w3.weight", "tok_embeddings.weight", "output.weight")
_DIM1 = ("attention.wo.weight", "feed_forward.w2.weight")


def megatron_slice(name: str, shape: tuple[int, ...], tp_rank: int, tp_size: int):
    """Default generator TP slice: even split of dim 0 or dim 1 by name, else replicated."""
    if tp_size == 1:
        return None
    dim = 0 if name.endswith(_DIM0) else 1 if name.endswith(_DIM1) else None
    if dim is None:
        return None
    if shape[dim] % tp_size:
        raise ValueError(f"generator tp={tp_size} does not divide dim {dim} of '{name}' {tuple(shape)}")
    length = shape[dim] // tp_size
    return dim, tp_rank * length, length


def _as_2d(shape: tuple[int, ...]) -> tuple[int, int]:
    return (shape[0], math.prod(shape[1:])) if shape else (1, 1)


def _align(n: int) -> int:
    return (n + ALIGN_BYTES - 1) // ALIGN_BYTES * ALIGN_BYTES


@dataclass(frozen=True)
class Piece:
    """One block of one parameter, from one trainer rank to one generator rank."""

    name: str
    trainer: int
    generator: int
    src_rows: tuple[int, int]  # in the trainer's local shard, viewed 2-D
    src_cols: tuple[int, int]  # columns of the 2-D view (full width unless a dim-1 TP slice)
    dst_rows: tuple[int, int]  # in the generator's local tensor (always its full width)
    full_cols: int  # the trainer tensor's 2-D width

    @property
    def src_contiguous(self) -> bool:
        return self.src_cols == (0, self.full_cols)

    @property
    def numel(self) -> int:
        return (self.dst_rows[1] - self.dst_rows[0]) * (self.src_cols[1] - self.src_cols[0])


@dataclass(frozen=True)
class GeneratorTensor:
    """Where one parameter's slice lives in a generator rank's slot (a flat uint8 buffer)."""

    name: str
    shape: tuple[int, ...]  # the generator's local shape
    offset_bytes: int
    nbytes: int


@dataclass(frozen=True)
class DdmaPlan:
    trainer_ranks: int
    generator_ranks: int
    tp_size: int
    dtype: torch.dtype  # the generator's parameter dtype (= wire dtype)
    pieces: tuple[Piece, ...]
    slots: tuple[tuple[GeneratorTensor, ...], ...]  # per generator rank
    slot_nbytes: tuple[int, ...]

    def pieces_between(self, trainer: int, generator: int) -> list[Piece]:
        return [p for p in self.pieces if p.trainer == trainer and p.generator == generator]

    def link_nbytes(self, trainer: int, generator: int) -> int:
        """Bytes one sync moves from ``trainer`` to ``generator``."""
        return sum(p.numel for p in self.pieces_between(trainer, generator)) * self.dtype.itemsize

    def spec(self) -> list:
        """What both sides must agree on, as plain data (for the handshake)."""
        return [self.trainer_ranks, self.generator_ranks, self.tp_size, str(self.dtype),
                [[(t.name, list(t.shape)) for t in s] for s in self.slots]]


def build_plan(named_shapes: NamedShapes, *, trainer_ranks: int, generator_ranks: int, tp_size: int = 1,
               dtype: torch.dtype | None = None, slice_fn: SliceFn = megatron_slice,
               max_piece_bytes: int = 64 << 20) -> DdmaPlan:
    """Pieces for every (parameter, trainer rank, generator rank); generator rank g is TP rank g % tp_size.

    ``dtype``: the generators' parameter dtype (default: the trainer's, per tensor). A piece is
    cut into row bands of at most ``max_piece_bytes`` so a sender's temporary stays bounded.
    """
    if trainer_ranks < 1 or generator_ranks < 1 or tp_size < 1 or generator_ranks % tp_size:
        raise ValueError(f"DDMA plan needs trainer_ranks>=1 and generator_ranks a multiple of tp_size, got "
                         f"T={trainer_ranks} G={generator_ranks} tp={tp_size}")
    if not named_shapes:
        raise ValueError("named_shapes is empty: nothing to synchronise")
    dtypes = {d for _, d in named_shapes.values()}
    dtype = dtype or (dtypes.pop() if len(dtypes) == 1 else torch.float32)
    pieces: list[Piece] = []
    slots: list[list[GeneratorTensor]] = [[] for _ in range(generator_ranks)]
    sizes = [0] * generator_ranks
    for name in sorted(named_shapes):
        shape = tuple(int(d) for d in named_shapes[name][0])
        rows, cols = _as_2d(shape)
        for g in range(generator_ranks):
            sl = slice_fn(name, shape, g % tp_size, tp_size)
            if sl is not None and sl[0] == 1 and len(shape) != 2:
                raise ValueError(f"'{name}' {shape}: a dim-1 generator slice needs a matrix")
            r0, r1 = (sl[1], sl[1] + sl[2]) if sl is not None and sl[0] == 0 else (0, rows)
            c0, c1 = (sl[1], sl[1] + sl[2]) if sl is not None and sl[0] == 1 else (0, cols)
            local = list(shape)
            if sl is not None:
                local[sl[0]] = sl[2]
            nbytes = (r1 - r0) * (c1 - c0) * dtype.itemsize
            slots[g].append(GeneratorTensor(name, tuple(local), sizes[g], nbytes))
            sizes[g] = _align(sizes[g] + nbytes)
            band = max(1, max_piece_bytes // max(1, (c1 - c0) * dtype.itemsize))
            for t in range(trainer_ranks):
                a0, a1 = fsdp_rows(rows, trainer_ranks, t)
                lo, hi = max(a0, r0), min(a1, r1)
                for s in range(lo, hi, band):
                    e = min(s + band, hi)
                    pieces.append(Piece(name, t, g, (s - a0, e - a0), (c0, c1), (s - r0, e - r0), cols))
    return DdmaPlan(trainer_ranks, generator_ranks, tp_size, dtype, tuple(pieces),
                    tuple(tuple(s) for s in slots), tuple(sizes))


def tensor_view(slot: torch.Tensor, t: GeneratorTensor, dtype: torch.dtype) -> torch.Tensor:
    """The generator's parameter ``t`` inside its uint8 slot buffer (no copy)."""
    return slot[t.offset_bytes:t.offset_bytes + t.nbytes].view(dtype).view(t.shape)


def src_block(local: torch.Tensor, p: Piece) -> torch.Tensor:
    """The piece's block of the trainer's local shard (a view; strided for a dim-1 slice)."""
    two_d = local.reshape(local.shape[0], -1) if local.dim() else local.reshape(1, 1)
    return two_d[p.src_rows[0]:p.src_rows[1], p.src_cols[0]:p.src_cols[1]]


def dst_block(param: torch.Tensor, p: Piece) -> torch.Tensor:
    """The piece's rows of the generator's local tensor (contiguous: full width)."""
    two_d = param.view(param.shape[0], -1) if param.dim() else param.view(1, 1)
    return two_d[p.dst_rows[0]:p.dst_rows[1]]
