"""Read the model out of a run's resumable checkpoint, `checkpoints/step_<N>/`, one tensor at a time.

The trainer writes that directory with torch.distributed.checkpoint (checkpoint/checkpoints.py):
`trainer/.metadata` (a pickle: per flattened key, e.g. `model.layers.0.attention.wq.weight`,
its global shape and the chunks each trainer rank saved) and one `__<rank>_0.distcp` file per
rank holding each chunk as a `torch.save` record at a byte offset. Beside it the trainer puts
`config.json` and the tokenizer (`checkpoint.save_model_files`), so the directory loads like
an export. Here the format is read directly rather than through `dcp.load`, which needs a
process group and a model already sharded the way it was saved:

  * the metadata is read by `dcp_metadata.read_metadata(stand_ins=True)`, the one allow-list
    unpickler, with plain stand-ins for the DCP record classes (no class from
    torch.distributed is imported or run; any other global in the file is refused, so a
    planted pickle cannot execute);
  * each tensor of the model is assembled from its chunks (every record read with
    `torch.load(weights_only=True)`), yielded, and dropped before the next: no rank ever
    holds more than one full tensor (FSDP2 shards of one parameter are put back together,
    the optimizer state is never read).
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Iterator

import torch

from .dcp_metadata import load_failure, read_metadata

TRAINER_DIR = "trainer"
METADATA_FILE = ".metadata"
MODEL_PREFIX = "model."  # checkpoint/checkpoints.py saves {"model": ..., "optim": ...}


def is_step_checkpoint(path) -> bool:
    return (Path(path) / TRAINER_DIR / METADATA_FILE).is_file()


def _metadata(trainer_dir: Path):
    return read_metadata(trainer_dir / METADATA_FILE, stand_ins=True)


def _read_chunk(trainer_dir: Path, info, sizes: tuple[int, ...]) -> tuple[torch.Tensor, Path]:
    file = trainer_dir / info.relative_path
    if getattr(info, "transform_descriptors", None):
        raise ValueError(f"{file}: chunk written with storage transforms {info.transform_descriptors}; "
                         "only plain DCP records are read")
    try:
        with open(file, "rb") as f:
            f.seek(info.offset)
            record = f.read(info.length)
        tensor = torch.load(io.BytesIO(record), map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise FileNotFoundError(f"checkpoint shard {file} is missing") from None
    except Exception as err:  # unpickling errors have no common base class
        raise ValueError(f"checkpoint shard {file} is corrupt or unreadable: {load_failure(err)}") from err
    if tuple(tensor.shape) != tuple(sizes):
        raise ValueError(f"{file}: chunk of shape {tuple(tensor.shape)} where the metadata says {tuple(sizes)}")
    return tensor, file


def step_shapes(path) -> dict[str, tuple[int, ...]]:
    """Our parameter name → global shape of each model tensor of a `step_<N>` directory, from
    the metadata alone (no weight read): what `checkpoint_check` compares with config.json."""
    meta = _metadata(Path(path) / TRAINER_DIR)
    return {key[len(MODEL_PREFIX):]: tuple(md.size) for key, md in meta.state_dict_metadata.items()
            if key.startswith(MODEL_PREFIX) and hasattr(md, "chunks")}


def check_shard_sizes(path) -> None:
    """Raise ValueError naming the shard when one is missing or shorter than the metadata says:
    a copy cut short (full disk, killed rsync) keeps its metadata and STABLE marker, and only
    the sizes show it before the trainer reads it."""
    trainer_dir = Path(path) / TRAINER_DIR
    need: dict[str, int] = {}
    for info in (_metadata(trainer_dir).storage_data or {}).values():
        name = str(info.relative_path)
        need[name] = max(need.get(name, 0), int(info.offset) + int(info.length))
    for name, size in sorted(need.items()):
        file = trainer_dir / name
        have = file.stat().st_size if file.is_file() else None
        if have is None or have < size:
            raise ValueError(f"{file} is {'missing' if have is None else f'truncated: {have} bytes'}"
                             f", the metadata needs {size}")


def step_tensors(path) -> Iterator[tuple[str, str, torch.Tensor, Path]]:
    """(stored key, our parameter name, full tensor, file) for each model tensor of a
    `step_<N>` directory, one at a time, in the order they were saved."""
    trainer_dir = Path(path) / TRAINER_DIR
    meta = _metadata(trainer_dir)
    chunks: dict[str, dict[tuple, object]] = {}
    for index, info in meta.storage_data.items():
        chunks.setdefault(index.fqn, {})[tuple(getattr(index, "offset", None) or ())] = info
    for key, md in meta.state_dict_metadata.items():
        if not key.startswith(MODEL_PREFIX) or not hasattr(md, "chunks"):
            continue  # optimizer state, and non-tensor entries
        props = md.properties  # (dtype, layout, requires_grad, memory_format, pin_memory), or fields
        dtype = props.fields[0] if hasattr(props, "fields") else props.dtype
        full = torch.empty(tuple(md.size), dtype=dtype)
        file, filled = trainer_dir, 0
        for chunk in md.chunks:
            offsets, sizes = tuple(chunk.offsets), tuple(chunk.sizes)
            if 0 in sizes:
                continue  # an FSDP2 rank whose shard of this tensor is empty
            info = chunks.get(key, {}).get(offsets)
            if info is None:
                raise ValueError(f"{trainer_dir / METADATA_FILE}: no stored chunk of {key!r} at {offsets}")
            tensor, file = _read_chunk(trainer_dir, info, sizes)
            full[tuple(slice(o, o + s) for o, s in zip(offsets, sizes))] = tensor
            filled += tensor.numel()
        if filled != full.numel():
            raise ValueError(f"{trainer_dir / METADATA_FILE}: the chunks of {key!r} cover {filled} of "
                             f"{full.numel()} elements")
        yield key, key[len(MODEL_PREFIX):], full, file
