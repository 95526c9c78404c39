"""Check a Hugging Face checkpoint against its config.json from the safetensors headers alone.

A safetensors file is 8 bytes of header length, a JSON header (name → dtype, shape, byte
offsets) and the data; the header says how long the file must be. So a truncated copy, a
missing or extra tensor and a config whose sizes disagree with the weights are all found
without reading one weight. The expected shapes come from the model code itself (built on
the meta device from config.json, as loading does), so every family the loader builds is
checked the same way. Legacy `pytorch_model*.bin` files are only checked to exist.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from .checkpoint import _IGNORED_RE, _weight_files, build_empty, hf_to_ours, ours_to_hf
from .lora import is_adapter
from .step_checkpoint import check_shard_sizes, is_step_checkpoint, step_shapes

_ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
             "BOOL": 1, "U16": 2, "U32": 4, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1}
MAX_HEADER_BYTES = 100 * 2**20  # safetensors' own limit


def read_header(file: Path) -> dict[str, dict]:
    """name → {"dtype", "shape", "data_offsets"} of a safetensors file, its size checked."""
    size = file.stat().st_size
    with open(file, "rb") as f:
        head = f.read(8)
        n = int.from_bytes(head, "little") if len(head) == 8 else -1
        if not 0 < n <= min(size - 8, MAX_HEADER_BYTES):
            raise ValueError(f"{file} is not a safetensors file or is truncated ({size} bytes)")
        try:
            header = json.loads(f.read(n))
        except ValueError as e:
            raise ValueError(f"{file}: unreadable safetensors header ({e})") from None
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    try:
        end = max((int(v["data_offsets"][1]) for v in tensors.values()), default=0)
        for name, v in tensors.items():
            start, stop = map(int, v["data_offsets"])
            itemsize = _ITEMSIZE.get(v["dtype"])
            if itemsize is not None and stop - start != math.prod(v["shape"]) * itemsize:
                raise ValueError(f"{file}: tensor {name!r} spans {stop - start} bytes, its shape "
                                 f"{tuple(v['shape'])} and dtype {v['dtype']} need {math.prod(v['shape']) * itemsize}")
    except (KeyError, TypeError, IndexError) as e:
        raise ValueError(f"{file}: malformed safetensors header ({type(e).__name__}: {e})") from None
    if 8 + n + end != size:
        what = "truncated" if 8 + n + end > size else "longer than its header says"
        raise ValueError(f"{file} is {what}: the header needs {8 + n + end} bytes, the file has {size} "
                         f"(an interrupted download or copy?)")
    return tensors


def check_checkpoint(path) -> None:
    """Raise (ValueError, KeyError, FileNotFoundError) naming the file and tensor when the
    weights on disk do not fit config.json; reads config.json and the headers only."""
    path = Path(path)
    if is_step_checkpoint(path) and any(is_adapter(n) for n in step_shapes(path)):
        raise ValueError(f"{path} is a LoRA run's step: it holds the adapters alone, not a model; "
                         f"`llamarl export {path} OUT --merged` writes one (without --merged: a PEFT adapter)")
    model, args = build_empty(path)  # meta device: shapes, no memory
    if is_step_checkpoint(path):  # a run's resumable checkpoint: shapes from the DCP metadata
        _check_step(path, {n: tuple(p.shape) for n, p in model.named_parameters()})
        check_shard_sizes(path)
        return
    expected = {ours_to_hf(n): tuple(p.shape) for n, p in model.named_parameters()}
    seen: set[str] = set()
    for file in _weight_files(path):
        if not file.is_file():
            raise FileNotFoundError(f"checkpoint shard {file} is missing")
        if file.suffix != ".safetensors":
            continue
        for hf_name, info in read_header(file).items():
            if _IGNORED_RE.search(hf_name):
                continue
            ours = hf_to_ours(hf_name)
            if ours is None:
                raise KeyError(f"{file}: unexpected tensor {hf_name!r} for this model")
            if hf_name not in expected:  # e.g. lm_head stored by a tied checkpoint
                continue
            if tuple(info["shape"]) != expected[hf_name]:
                raise ValueError(f"{file}: tensor {hf_name!r} has shape {tuple(info['shape'])}, "
                                 f"{path / 'config.json'} implies {expected[hf_name]}")
            seen.add(hf_name)
    files = _weight_files(path)
    if all(f.suffix == ".safetensors" for f in files):
        missing = sorted(set(expected) - seen)
        if missing:
            raise KeyError(f"checkpoint {path} lacks {len(missing)} tensors, e.g. {missing[:5]}")


def _check_step(path: Path, expected: dict[str, tuple[int, ...]]) -> None:
    stored = step_shapes(path)
    meta = path / "trainer" / ".metadata"
    for name, shape in stored.items():
        if name in expected and shape != expected[name]:
            raise ValueError(f"{meta}: tensor {name!r} has shape {shape}, {path / 'config.json'} implies "
                             f"{expected[name]}")
    missing = sorted(set(expected) - set(stored))
    if missing:
        raise KeyError(f"checkpoint {path} lacks {len(missing)} tensors, e.g. {missing[:5]}")
