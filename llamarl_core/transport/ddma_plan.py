"""DDMA transfer plan: which trainer rank sends which block of which parameter to whom.

LlamaRL §4.3: with FSDP each trainer rank owns a dim-0 shard of every parameter (under HSDP,
a shard of its replica's copy: ``trainer_shards``), and a
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

fp8 on the wire (``fp8=`` names, when the generators quantize to fp8): those tensors travel
as float8_e4m3fn with one float32 scale per row of the generator's local tensor (placed right
after its data in the slot), computed by the sender exactly as the generator's engine would
quantize the weight it holds (`fp8_rows`): its rows span the generator's full local width, so
each row's scale is the one the engine computes, and the generator computes from what arrived.

Pure: no torch.distributed. Sender and receivers derive the same plan from the same
``named_shapes`` and sizes, so no offsets travel.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from llamarl_core.config.choices import WEIGHT_SLOTS
from llamarl_core.config.schema import ControllerConfig, GeneratorResources
from llamarl_core.generation.quant import FP8_DTYPE, scale_name  # noqa: F401 (the engine's fp8 format; re-exported)
from llamarl_core.models.args import ModelArgs
from llamarl_core.models.tp_slices import fsdp_rows, serving_replica, tp_slice  # fsdp_rows re-exported: the plan's row rule

ALIGN_BYTES = 64
SCALE_BYTES = 4  # one float32 scale per row of an fp8 tensor
NamedShapes = dict[str, tuple[tuple[int, ...], torch.dtype]]


def piece_bytes(weight_bucket_mb: float) -> int:
    """The largest piece a sender cuts (`controller.weight_bucket_mb`: two pieces in flight)."""
    return int(weight_bucket_mb * 2**20) // 2


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
    scale_offset_bytes: int = -1  # fp8 on the wire: float32 per-row scales here; -1: none

    @property
    def fp8(self) -> bool:
        return self.scale_offset_bytes >= 0


@dataclass(frozen=True)
class DdmaPlan:
    trainer_ranks: int
    generator_ranks: int
    tp_size: int
    dtype: torch.dtype  # the generator's parameter dtype (= wire dtype)
    pieces: tuple[Piece, ...]
    slots: tuple[tuple[GeneratorTensor, ...], ...]  # per generator rank
    slot_nbytes: tuple[int, ...]
    fp8_names: frozenset = frozenset()  # tensors that travel as fp8 + per-row scales
    trainer_shards: int = 0  # ranks one copy of the weights is sharded over (0: all trainer ranks)
    dim0: tuple = ()  # (name, full rows) of every tensor, for the senders' exact shard check
    num_slots: int = 2  # per generator rank: 2 = decode on while the next version lands; 1 = pause for it

    def shard_rows(self, name: str, trainer: int) -> tuple[int, int]:
        """Rows of ``name`` trainer rank ``trainer`` holds: its FSDP shard within its replica."""
        shards = self.trainer_shards or self.trainer_ranks
        return fsdp_rows(dict(self.dim0)[name], shards, trainer % shards)

    def wire_dtype(self, name: str) -> torch.dtype:
        return FP8_DTYPE if name in self.fp8_names else self.dtype

    def piece_nbytes(self, p: Piece) -> int:
        """Bytes of one piece on the wire (fp8: one byte per element + a float32 scale per row)."""
        if p.name in self.fp8_names:
            return p.numel + (p.dst_rows[1] - p.dst_rows[0]) * SCALE_BYTES
        return p.numel * self.dtype.itemsize

    def pieces_between(self, trainer: int, generator: int) -> list[Piece]:
        return [p for p in self.pieces if p.trainer == trainer and p.generator == generator]

    def link_nbytes(self, trainer: int, generator: int) -> int:
        """Bytes one sync moves from ``trainer`` to ``generator``."""
        return sum(self.piece_nbytes(p) for p in self.pieces_between(trainer, generator))

    def spec(self) -> list:
        """What both sides must agree on, as plain data (for the handshake)."""
        return [self.trainer_ranks, self.generator_ranks, self.tp_size, str(self.dtype),
                [[(t.name, list(t.shape), t.fp8) for t in s] for s in self.slots], self.num_slots]


def build_plan(named_shapes: NamedShapes, *, trainer_ranks: int, generator_ranks: int, tp_size: int = 1,
               args: ModelArgs | None = None, dtype: torch.dtype | None = None,
               max_piece_bytes: int | None = None, fp8: Callable[[str], bool] | None = None,
               trainer_shards: int = 0, num_slots: int = GeneratorResources.weight_slots,
               groups: list[list[str]] = ()) -> DdmaPlan:
    """Pieces for every (parameter, trainer rank, generator rank); generator rank g is TP rank g % tp_size.

    ``args``: the model's ModelArgs, needed when ``tp_size > 1``: generator rank g holds
    `models/tp_slices.tp_slice` of each tensor, the one slicing rule (the generator's
    `tensor_parallel.shard_model_`, the checksums and the simulator's byte count use it too).
    ``dtype``: the generators' parameter dtype (default: the trainer's, per tensor). A piece is
    cut into row bands of at most ``max_piece_bytes`` so a sender's temporary stays bounded
    (default: `piece_bytes` of the schema's ``controller.weight_bucket_mb``, as a run uses).
    ``fp8(name)``: whether that (matrix) tensor travels as fp8 with per-row scales.
    ``trainer_shards``: under HSDP, the FSDP group size s (trainer rank t holds
    ``fsdp_rows(rows, s, t % s)``, T/s replicas hold the same rows); 0 = T (FSDP over every
    rank, or DDP replicas that each send 1/T of the rows).
    ``num_slots``: weight copies per generator rank (``resources.generator.weight_slots``).
    ``groups``: names laid out back to back, in this order, in every slot (the engine's fused
    projections, `generation.fused.fused_param_groups`: it then computes from the slot itself);
    other tensors start 64-byte aligned, in name order.
    """
    if trainer_ranks < 1 or generator_ranks < 1 or tp_size < 1 or generator_ranks % tp_size:
        raise ValueError(f"DDMA plan needs trainer_ranks>=1 and generator_ranks a multiple of tp_size, got "
                         f"T={trainer_ranks} G={generator_ranks} tp={tp_size}")
    shards = trainer_shards or trainer_ranks
    if shards < 1 or trainer_ranks % shards:
        raise ValueError(f"DDMA plan: trainer_shards={trainer_shards} does not divide T={trainer_ranks} trainer ranks")
    replicas = trainer_ranks // shards
    if num_slots not in WEIGHT_SLOTS:
        raise ValueError(f"DDMA plan: num_slots must be one of {WEIGHT_SLOTS}, got {num_slots}")
    max_piece_bytes = piece_bytes(ControllerConfig.weight_bucket_mb) if max_piece_bytes is None else max_piece_bytes
    if not named_shapes:
        raise ValueError("named_shapes is empty: nothing to synchronise")
    if tp_size > 1 and args is None:
        raise ValueError(f"DDMA plan with generator tp={tp_size} needs the model's ModelArgs (args=) to slice by heads")
    dtypes = {d for _, d in named_shapes.values()}
    dtype = dtype or (dtypes.pop() if len(dtypes) == 1 else torch.float32)
    pieces: list[Piece] = []
    fp8_names: set[str] = set()
    slots: list[list[GeneratorTensor]] = [[] for _ in range(generator_ranks)]
    sizes = [0] * generator_ranks
    order, then = _slot_order(named_shapes, groups)
    for name in order:
        shape = tuple(int(d) for d in named_shapes[name][0])
        rows, cols = _as_2d(shape)
        for g in range(generator_ranks):
            sl = tp_slice(name, shape, args, g % tp_size, tp_size) if tp_size > 1 and shape else None
            if sl is not None and sl.dim == 1 and len(shape) != 2:
                raise ValueError(f"'{name}' {shape}: a dim-1 generator slice needs a matrix")
            r0, r1 = (sl.start, sl.stop) if sl is not None and sl.dim == 0 else (0, rows)
            c0, c1 = (sl.start, sl.stop) if sl is not None and sl.dim == 1 else (0, cols)
            local = list(shape)
            if sl is not None:
                local[sl.dim] = sl.size
            quantized = fp8 is not None and fp8(name)
            if quantized and len(shape) != 2:
                raise ValueError(f"'{name}' {shape}: fp8 on the wire (per-row scales) needs a matrix")
            itemsize = 1 if quantized else dtype.itemsize
            nbytes = (r1 - r0) * (c1 - c0) * itemsize
            scale_at = _align(sizes[g] + nbytes) if quantized else -1
            slots[g].append(GeneratorTensor(name, tuple(local), sizes[g], nbytes, scale_at))
            nxt = then.get(name)  # its group's next member follows at once: one [rows, cols] run
            packed = (nxt is not None and not quantized and not (fp8 is not None and fp8(nxt))
                      and _as_2d(tuple(named_shapes[nxt][0]))[1] == cols)
            sizes[g] = sizes[g] + nbytes if packed else \
                _align(scale_at + (r1 - r0) * SCALE_BYTES if quantized else sizes[g] + nbytes)
            if quantized:
                fp8_names.add(name)
            band = max(1, max_piece_bytes // max(1, (c1 - c0) * itemsize))
            for t in _senders(g, tp_size, shards, replicas):
                a0, a1 = fsdp_rows(rows, shards, t % shards)
                lo, hi = max(a0, r0), min(a1, r1)
                for s in range(lo, hi, band):
                    e = min(s + band, hi)
                    pieces.append(Piece(name, t, g, (s - a0, e - a0), (c0, c1), (s - r0, e - r0), cols))
    dim0 = tuple((n, _as_2d(tuple(named_shapes[n][0]))[0]) for n in sorted(named_shapes))
    return DdmaPlan(trainer_ranks, generator_ranks, tp_size, dtype, tuple(pieces),
                    tuple(tuple(s) for s in slots), tuple(sizes), frozenset(fp8_names), shards, dim0, num_slots)


def _senders(generator: int, tp_size: int, shards: int, replicas: int) -> range:
    """The trainer ranks that send to `generator`: the shards of its `serving_replica`."""
    replica = serving_replica(generator, tp_size, replicas)
    return range(replica * shards, (replica + 1) * shards)


def _slot_order(named_shapes: NamedShapes, groups) -> tuple[list[str], dict[str, str]]:
    """(names in slot order, name → the next member of its group): name order, except that a
    group's members follow its first one. Groups naming absent tensors are ignored."""
    first, then = {}, {}
    for group in groups:
        if len(group) > 1 and all(n in named_shapes for n in group):
            first[min(group)] = group
            then.update(zip(group[:-1], group[1:]))
    grouped = {n for g in first.values() for n in g}
    order = []
    for name in sorted(named_shapes):
        if name in first:
            order += first[name]
        elif name not in grouped:
            order.append(name)
    return order, then


def tensor_view(slot: torch.Tensor, t: GeneratorTensor, dtype: torch.dtype) -> torch.Tensor:
    """The generator's parameter ``t`` inside its uint8 slot buffer (no copy; fp8 tensors are
    viewed as fp8 whatever ``dtype`` says)."""
    return slot[t.offset_bytes:t.offset_bytes + t.nbytes].view(FP8_DTYPE if t.fp8 else dtype).view(t.shape)


def scale_view(slot: torch.Tensor, t: GeneratorTensor) -> torch.Tensor:
    """The float32 per-row scales of fp8 tensor ``t`` inside the slot (no copy)."""
    return slot[t.scale_offset_bytes:t.scale_offset_bytes + t.shape[0] * SCALE_BYTES].view(torch.float32)


def fp8_rows(block: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(q float8_e4m3fn [r, c], scale float32 [r]) of ``block`` held in ``dtype`` (the generators'
    dtype): the engine's own per-output-channel quantization (generation/quant.py
    `QuantizedLinear`), so what arrives equals what the generator would compute from its weights."""
    from llamarl_core.generation.quant import QuantizedLinear

    quantized = QuantizedLinear(block.to(dtype), "fp8")
    return quantized.q, quantized.scale


def src_block(local: torch.Tensor, p: Piece) -> torch.Tensor:
    """The piece's block of the trainer's local shard (a view; strided for a dim-1 slice)."""
    two_d = local.reshape(local.shape[0], -1) if local.dim() else local.reshape(1, 1)
    return two_d[p.src_rows[0]:p.src_rows[1], p.src_cols[0]:p.src_cols[1]]


def dst_block(param: torch.Tensor, p: Piece) -> torch.Tensor:
    """The piece's rows of the generator's local tensor (contiguous: full width)."""
    two_d = param.view(param.shape[0], -1) if param.dim() else param.view(1, 1)
    return two_d[p.dst_rows[0]:p.dst_rows[1]]
