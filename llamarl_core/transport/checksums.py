"""Optional proof that a weight sync delivered exactly the trainer's weights.

With `run.weight_checksums=true`, the trainer (on send) and every generator rank (on
receive) append `{role, rank, version, sha256}` to `<run_dir>/weight_checksums.jsonl`.
Hashing costs a pass over the weights, so it is off by default. With a tensor-parallel
generator (tp > 1) the trainer records one line per TP slice it sends (`tp_rank`, sha256 of
`tp_layout.shard_state`) and each generator rank the slice it holds, with the same fields.
With fp8 on the wire the trainer hashes what the generator holds: each slice's block linears
quantized (`fp8_state`: fp8 weights plus `<name>#scale`), as the sender quantizes them.
"""
from __future__ import annotations

import hashlib
import json
import os

import torch

from llamarl_core.transport.ddma_plan import fp8_rows, scale_name
from llamarl_core.transport.tp_layout import shard_state


def weights_sha256(params: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(params):
        h.update(name.encode())
        h.update(params[name].detach().contiguous().cpu().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def record(run_dir: str, role: str, rank: int, version: int, params: dict[str, torch.Tensor],
           **fields) -> None:
    """`fields` (e.g. replica, tp_rank, tp of a tensor-parallel generator rank) go into the line."""
    line = {"role": role, "rank": rank, "version": version, "sha256": weights_sha256(params), **fields}
    with open(os.path.join(run_dir, "weight_checksums.jsonl"), "a") as f:
        f.write(json.dumps(line) + "\n")


def fp8_state(state: dict[str, torch.Tensor], fp8) -> dict[str, torch.Tensor]:
    """`state` as an fp8 wire delivers it: names with `fp8(name)` as (fp8 weights, row scales)."""
    out = {}
    for name, t in state.items():
        if fp8(name):
            out[name], out[scale_name(name)] = fp8_rows(t, t.dtype)
        else:
            out[name] = t
    return out


def record_slices(run_dir: str, role: str, rank: int, version: int, full: dict[str, torch.Tensor],
                  args, tp: int, fp8=None) -> None:
    """One line per generator TP rank: the sha256 of the slice of `full` that rank holds
    (`fp8`: the predicate of the tensors an fp8 wire quantizes, per slice)."""
    for tp_rank in range(tp):
        state = shard_state(full, args, tp_rank, tp)
        record(run_dir, role, rank, version, fp8_state(state, fp8) if fp8 else state, tp_rank=tp_rank, tp=tp)
