"""Optional proof that a weight sync delivered exactly the trainer's weights.

With `run.weight_checksums=true`, the trainer (on send) and every generator rank (on
receive) append `{role, rank, version, sha256}` to `<run_dir>/weight_checksums.jsonl`.
Hashing costs a pass over the weights, so it is off by default.
"""
from __future__ import annotations

import hashlib
import json
import os

import torch


def weights_sha256(params: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(params):
        h.update(name.encode())
        h.update(params[name].detach().contiguous().cpu().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def record(run_dir: str, role: str, rank: int, version: int, params: dict[str, torch.Tensor]) -> None:
    line = {"role": role, "rank": rank, "version": version, "sha256": weights_sha256(params)}
    with open(os.path.join(run_dir, "weight_checksums.jsonl"), "a") as f:
        f.write(json.dumps(line) + "\n")
