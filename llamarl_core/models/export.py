"""Hugging Face exports in a chosen dtype (`export.dtype`), and the converter behind
`llamarl export`: a run's `checkpoints/step_<N>` (DCP shards) → a directory transformers loads.

A step directory is already a model to llamarl (config.json and the source's tokenizer files
beside the trainer's shards, `step_checkpoint.py`), so the export is: check it (sizes from
the metadata, shapes against config.json), then stream its tensors, one at a time and cast
to the export dtype, into safetensors shards written by the same `save_streamed` the run's
`checkpoints/final` uses, with the family's config.json and the tokenizer, chat template and
generation_config.json byte for byte. Every read goes through the allow-list readers (the DCP
metadata unpickler, `torch.load(weights_only=True)`, safetensors); nothing is unpickled freely.

It is written into a hidden sibling directory and renamed into place at the end, so a source
found broken half-way (a corrupt record) leaves nothing at OUT_DIR.

A LoRA run's step holds only the adapters (the base is frozen, `model.checkpoint`): it exports
as a PEFT adapter directory (`export_adapter`, models/peft_io.py), or merged into the base as
W + s·B@A (`export_checkpoint(base, ..., lora=...)`, `--merged`), each projection merged in
float32 as it streams past, then cast to the export dtype.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch

from llamarl_core.config.choices import DTYPES

from .checkpoint import _IGNORED_RE, _weight_files, build_empty, checkpoint_tensors, hf_to_ours, save_streamed
from .checkpoint_check import check_checkpoint
from .dtypes import TORCH_DTYPES
from .hf_config import read_config
from .lora import adapter_target, is_adapter, merged
from .step_checkpoint import check_shard_sizes, is_step_checkpoint, step_shapes, step_tensors
from .tokenizer import load_tokenizer

DEFAULT_DTYPE = "float32"  # transformers' own default when config.json names none; built-in presets


def source_dtype(checkpoint) -> str:
    """The dtype a checkpoint's config.json says its weights are (`dtype`, transformers 5.x, or
    `torch_dtype`, 4.x); float32 when it names none or for a built-in preset (`None`)."""
    if not checkpoint:
        return DEFAULT_DTYPE
    config = read_config(Path(checkpoint))
    name = config.get("dtype") or config.get("torch_dtype")
    if name is None:
        return DEFAULT_DTYPE
    if name not in DTYPES:
        raise ValueError(f"{Path(checkpoint) / 'config.json'}: torch_dtype={name!r} is not one of "
                         f"{', '.join(DTYPES)}; set export.dtype to one of them")
    return name


def export_dtype(name: str, checkpoint) -> torch.dtype:
    """`export.dtype` as a torch dtype: `auto` is the dtype of `checkpoint` (model.checkpoint)."""
    return TORCH_DTYPES[source_dtype(checkpoint) if name == "auto" else name]


def check_out_dir(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"{out} is not empty (or not a directory): the export writes a fresh "
                              f"directory; name a new one")


def _stored_order(src: Path, shapes: dict) -> list[str]:
    """Our names of the parameters in the order `checkpoint_tensors` yields them, from the
    metadata or the safetensors headers alone (no weight read)."""
    if is_step_checkpoint(src):
        return [n for n in step_shapes(src) if n in shapes]
    from safetensors import safe_open

    names = []
    for file in _weight_files(src):
        if file.suffix != ".safetensors":
            raise ValueError(f"{file}: legacy .bin weights are not exported (load and save them with "
                             f"transformers first)")
        with safe_open(str(file), framework="pt") as handle:  # the same order _iter_tensors reads
            names += [hf_to_ours(k) for k in handle.keys() if not _IGNORED_RE.search(k)]
    return [n for n in names if n in shapes]


def export_checkpoint(src, out, dtype: torch.dtype, max_shard_bytes: int = 5 * 2**30, lora=None) -> Path:
    """Write `src` (a run's step_<N>, or a Hugging Face directory such as checkpoints/final)
    as a Hugging Face directory at `out` with weights in `dtype`; `lora` (AdapterSpec, {our
    adapter name: tensor}) is merged into `src`'s weights on the way. Raises (ValueError, KeyError,
    FileNotFoundError, FileExistsError) naming the file before anything is written."""
    src, out = Path(src), Path(out)
    check_out_dir(out)
    check_checkpoint(src)  # config.json against the weights' shapes, shard sizes: headers only
    tokenizer = load_tokenizer(src)  # an export without its tokenizer is not a usable model
    model, args = build_empty(src)  # meta device: the shapes, no memory
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}  # a tied head appears once
    order = _stored_order(src, shapes)
    tensors = checkpoint_tensors(src, args, shapes)
    if lora is not None:
        tensors = _merged(tensors, lora[0].scale, _adapter_pairs(lora[1], shapes, src))
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.parent / f".{out.name}.partial-{os.getpid()}"
    try:
        save_streamed(tensors, {n: shapes[n] for n in order}, dtype, args, tokenizer, partial, max_shard_bytes)
        os.replace(partial, out)  # onto an absent or empty directory
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return out


def is_lora_step(src) -> bool:
    """Whether a step_<N> holds adapters (a LoRA run's: adapters and optimizer only)."""
    return is_step_checkpoint(src) and any(is_adapter(n) for n in step_shapes(src))


def step_adapters(src) -> dict[str, torch.Tensor]:
    """{our adapter name: tensor} of a LoRA run's step_<N>, through the allow-list DCP reader.
    A base tensor saved beside them is the frozen base's and is dropped: `get_state_dict(...,
    ignore_frozen_params=True)` still keeps a tied head (`output.weight`)."""
    src = Path(src)
    check_shard_sizes(src)
    return {name: tensor for _, name, tensor, _ in step_tensors(src) if is_adapter(name)}


def export_adapter(src, out, spec, dtype: torch.dtype) -> Path:
    """A LoRA run's step_<N> as a PEFT adapter directory at `out` (`spec`: an AdapterSpec, from
    the step's state.json or the run's model.lora; its base_model goes into adapter_config.json)."""
    from .peft_io import save_adapter

    check_out_dir(Path(out))
    return save_adapter(step_adapters(src), spec, spec.base_model, out, dtype)


def _adapter_pairs(tensors: dict, shapes: dict, base: Path) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{base weight name: (A, B)}, every pair checked against the base's weight shape first."""
    pairs = {}
    for name in tensors:
        if not name.endswith("lora_A.weight"):
            continue
        weight = adapter_target(name) + ".weight"
        a, b = tensors[name], tensors.get(name[:-len("lora_A.weight")] + "lora_B.weight")
        if weight not in shapes or b is None or (b.shape[0], a.shape[1]) != shapes[weight]:
            raise ValueError(f"adapter {name} (A {tuple(a.shape)}, B {tuple(b.shape) if b is not None else None}) "
                             f"does not fit {weight} {shapes.get(weight)} of the base {base}")
        pairs[weight] = (a, b)
    return pairs


def _merged(tensors, scale: float, pairs: dict):
    """The base's tensors with W + s·B@A (in float32) where an adapter targets W."""
    for name, w in tensors:
        if name in pairs:
            w = merged(w.float(), *pairs[name], scale)
        yield name, w
