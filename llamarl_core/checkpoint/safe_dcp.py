"""Reading a torch.distributed.checkpoint (DCP) without running a pickle.

DCP's own reader unpickles the checkpoint's `.metadata` with the plain pickle module, and its
default planner reads non-tensor values (the optimizer's hyper-parameters) with torch's loader
and weights_only off: a file planted in a run directory would run its code when `run.resume=auto`
reads it. Here the metadata goes through the one allow-list unpickler
(`models/dcp_metadata.py`, which `llamarl eval` of a step directory reads it with too), and
every non-tensor value through `torch.load(weights_only=True)`. Tensors DCP already reads with
`weights_only=True`.
"""
from __future__ import annotations

import io
import os

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import BytesStorageMetadata, Metadata

from llamarl_core.models.dcp_metadata import UnsafeCheckpoint, load_failure, read_metadata

__all__ = ["SafePlanner", "SafeReader", "UnsafeCheckpoint", "load_value", "read_metadata", "verify"]


def load_value(data: bytes, where: str):
    """One non-tensor value as DCP saved it (torch.save), read with weights_only=True."""
    try:
        return torch.load(io.BytesIO(data), weights_only=True)
    except Exception as e:  # torch's message is a page long: keep the line that says why
        raise UnsafeCheckpoint(f"{where}: refused to load it with weights_only=True ({load_failure(e)})") from None


class SafeReader(FileSystemReader):
    def read_metadata(self, *args, **kwargs) -> Metadata:
        metadata = read_metadata(str(self._get_metadata_path(kwargs.get("rank"))))
        if getattr(metadata, "storage_meta", None) is not None:
            metadata.storage_meta.load_id = self.load_id
        return metadata


class SafePlanner(DefaultLoadPlanner):
    def load_bytes(self, read_item, value: io.BytesIO) -> None:
        obj = load_value(value.read(), f"checkpoint value {read_item.dest_index.fqn}")
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], obj)
        else:
            self.state_dict[read_item.dest_index.fqn] = obj


def verify(dcp_dir: str) -> Metadata:
    """Read what a resume reads before any tensor: the metadata and every non-tensor value.
    Raises UnsafeCheckpoint naming the file (the controller calls this before launch)."""
    metadata = read_metadata(os.path.join(dcp_dir, ".metadata"))
    for index, info in (metadata.storage_data or {}).items():
        if not isinstance(metadata.state_dict_metadata.get(index.fqn), BytesStorageMetadata):
            continue
        path = os.path.join(dcp_dir, str(info.relative_path))
        try:
            with open(path, "rb") as f:
                f.seek(info.offset)
                data = f.read(info.length)
        except OSError as e:
            raise UnsafeCheckpoint(f"{path}: cannot read it ({e.strerror or e})") from None
        load_value(data, f"{path} (value {index.fqn})")
    return metadata
