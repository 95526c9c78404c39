"""CUDA IPC byte buffers: the shm transport's GPU twin, for a generator and a trainer that
share one GPU (`resources.share_devices`; NCCL refuses two ranks of a group on one device).

The trainer allocates the bucket buffers on its GPU and hands out their IPC handles (torch's
`reduce_tensor`, as torch.multiprocessing makes them); the generator rebuilds them, mapping the
same device memory, so a sync is one device-to-device copy in and one out. The handles cross
the run's TCPStore, which has no authentication, so they travel as their fields in JSON
(`to_json`), never as a pickle: `from_json` checks every field's type and range and
`open_shared` calls torch's own rebuild function with them, its other arguments fixed here. The protocol around the buffers (two slots, version
keys, acknowledgements) is the shm transport's, in ddma.py. Packing and unpacking are
kernels on the current stream, so each side synchronises before it publishes or acknowledges.
"""
from __future__ import annotations

import base64
import json

import torch
from torch.multiprocessing.reductions import rebuild_cuda_tensor, reduce_tensor

# The fields of reduce_tensor's arguments that vary (the storage's `_share_cuda_()`), in order.
FIELDS = ("device", "handle", "storage_size_bytes", "storage_offset_bytes", "ref_counter_handle",
          "ref_counter_offset", "event_handle", "event_sync_required")
_BYTES = ("handle", "ref_counter_handle", "event_handle")
MAX_HANDLE_BYTES = 4096  # a CUDA IPC handle is 64 bytes; a ref-counter file name is short


def create(sizes: list[int], device: torch.device | str | None = None) -> list[torch.Tensor]:
    """One zeroed uint8 buffer per entry of `sizes`, on `device` (default: the current GPU)."""
    device = device or torch.device("cuda", torch.cuda.current_device())
    return [torch.zeros(n, dtype=torch.uint8, device=device) for n in sizes]


def share(buffers: list[torch.Tensor]) -> list[tuple]:
    """torch's IPC handles; the owner must keep `buffers` alive while readers map them."""
    return [reduce_tensor(b) for b in buffers]


def to_json(handles: list[tuple]) -> str:
    """share()'s handles of 1-D uint8 buffers as JSON: per buffer its length, offset and FIELDS."""
    out = []
    for rebuild, args in handles:
        _, size, stride, offset, _, dtype, *shared = args[:6] + args[6:10] + args[11:]
        if rebuild is not rebuild_cuda_tensor or dtype != torch.uint8 or len(size) != 1 or tuple(stride) != (1,):
            raise ValueError(f"cuda_ipc: only 1-D uint8 CUDA buffers are shared, got {dtype} {tuple(size)}")
        fields = dict(zip(FIELDS, shared))
        for key in _BYTES:
            fields[key] = None if fields[key] is None else base64.b64encode(bytes(fields[key])).decode()
        out.append({"numel": int(size[0]), "offset": int(offset), **fields})
    return json.dumps(out)


def from_json(text: str | bytes, nbytes: int) -> list[dict]:
    """Validated fields of to_json's buffers, each `nbytes` long; ValueError on anything else."""
    try:
        items = json.loads(text)
    except (ValueError, TypeError) as e:  # a pickle, or any other bytes, is not JSON
        raise ValueError(f"CUDA IPC handles are not the JSON the trainer publishes ({e})") from None
    if not isinstance(items, list) or not items:
        raise ValueError("CUDA IPC handles: expected a non-empty JSON list")
    return [_checked(item, nbytes) for item in items]


def _checked(item, nbytes: int) -> dict:
    if not isinstance(item, dict) or set(item) != {"numel", "offset", *FIELDS}:
        raise ValueError(f"CUDA IPC handle: expected the keys numel, offset, {', '.join(FIELDS)}")
    out = {}
    for key, value in item.items():
        if key in _BYTES:
            if not isinstance(value, str) or len(value) > 2 * MAX_HANDLE_BYTES:
                raise ValueError(f"CUDA IPC handle: {key} must be a base64 string")
            out[key] = base64.b64decode(value, validate=True)
        elif key == "event_sync_required":
            if not isinstance(value, bool):
                raise ValueError(f"CUDA IPC handle: {key} must be true or false")
            out[key] = value
        elif not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"CUDA IPC handle: {key}={value!r} must be an integer >= 0")
        else:
            out[key] = value
    if out["numel"] != nbytes or out["offset"] + nbytes > out["storage_size_bytes"]:
        raise ValueError(f"CUDA IPC handle: a {out['numel']}-byte buffer at offset {out['offset']} of a "
                         f"{out['storage_size_bytes']}-byte storage; the plan needs {nbytes} bytes")
    return out


def rebuild_args(fields: dict) -> tuple:
    """reduce_tensor's argument tuple for one validated buffer: a plain uint8 tensor."""
    shared = tuple(fields[k] for k in FIELDS)
    return (torch.Tensor, torch.Size([fields["numel"]]), (1,), fields["offset"], torch.storage.TypedStorage,
            torch.uint8, *shared[:4], False, *shared[4:])


def open_shared(fields: list[dict]) -> list[torch.Tensor]:
    """The owner's buffers from from_json's fields, mapped into this process (same GPU memory)."""
    return [rebuild_cuda_tensor(*rebuild_args(f)) for f in fields]


def fence() -> None:
    """Wait for this process's queued copies to finish before another process reads them."""
    torch.cuda.synchronize()
