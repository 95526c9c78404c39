"""The one reader of a torch.distributed.checkpoint (DCP) `.metadata` file that runs no pickle.

DCP's own reader unpickles `.metadata` with the plain pickle module: a file planted in a run
directory would run its code when a resume or `llamarl eval checkpoint=step_<N>` reads it.
Here it goes through an unpickler that can only build what DCP writes there (the "restricting
globals" recipe of Python's pickle docs; torch's weights-only unpickler stops at the
protocol-4 frames DCP writes): DCP's metadata records, `torch.Size`, dtypes and layouts,
paths, `OrderedDict`. Any other global is refused before it is looked up.

Two callers, one allow-list:
  * the trainer's resume (`checkpoint/safe_dcp.py`) needs DCP's real classes, which DCP's
    planner checks with `isinstance`: `read_metadata(path)`;
  * reading the weights out of a step directory (`step_checkpoint.py`) needs only the
    fields, and model code never imports torch.distributed: `read_metadata(path,
    stand_ins=True)` builds each DCP record as a plain object holding its pickled state.
"""
from __future__ import annotations

import pickle

import torch

_DCP = "torch.distributed.checkpoint."
_RECORDS = {  # DCP's own classes: real ones, or stand-ins
    _DCP + "metadata": {"Metadata", "MetadataIndex", "StorageMeta", "TensorProperties", "TensorStorageMetadata",
                        "BytesStorageMetadata", "ChunkStorageMetadata", "_MEM_FORMAT_ENCODING"},
    _DCP + "filesystem": {"_StorageInfo"},
}
_PLAIN = {  # harmless to build for real in either mode
    "torch.serialization": {"_get_layout"},
    "torch": {"Size"},
    "pathlib": {"PosixPath", "PurePosixPath"},
    "collections": {"OrderedDict"},
}


class UnsafeCheckpoint(ValueError):
    """A checkpoint file that holds something other than what llamarl writes."""


class Record:
    """Stand-in for a DCP metadata record: just its fields (`TensorProperties` pickles a tuple,
    kept as `.fields`; a slotted class pickles `(dict, slots)`, merged)."""

    def __setstate__(self, state):
        if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):
            state = {**(state[0] or {}), **state[1]}
        if isinstance(state, dict):
            self.__dict__.update(state)
        else:
            self.fields = state


class _MetadataUnpickler(pickle.Unpickler):
    def __init__(self, file, stand_ins: bool) -> None:
        super().__init__(file)
        self.stand_ins = stand_ins

    def find_class(self, module: str, name: str):
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        if name in _RECORDS.get(module, ()):
            if not self.stand_ins:
                return super().find_class(module, name)
            return (lambda *a: a) if name == "_MEM_FORMAT_ENCODING" else type(name, (Record,), {})
        if name in _PLAIN.get(module, ()):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refused to load {module}.{name} (not part of a DCP checkpoint)")


def load_failure(e: Exception) -> str:
    """The one line of a `torch.load(weights_only=True)` failure that says why (torch's own
    message is a page long), for errors that must fit on one line."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return next((ln for ln in lines if "WeightsUnpickler error" in ln or "Unsupported" in ln),
                lines[0] if lines else type(e).__name__)


def read_metadata(path, stand_ins: bool = False):
    """The DCP metadata file `path` (DCP's `Metadata`, or with `stand_ins` a `Record` of the
    same fields), or UnsafeCheckpoint naming the file: nothing in it runs."""
    try:
        with open(path, "rb") as f:
            metadata = _MetadataUnpickler(f, stand_ins).load()
    except OSError as e:
        raise UnsafeCheckpoint(f"{path}: cannot read it ({e.strerror or e})") from None
    except Exception as e:  # a pickle refused or garbled has no common base class
        raise UnsafeCheckpoint(f"{path} is not a checkpoint metadata file llamarl wrote ({e})") from None
    if type(metadata).__name__ != "Metadata":
        raise UnsafeCheckpoint(f"{path} holds a {type(metadata).__name__}, not DCP metadata")
    return metadata
