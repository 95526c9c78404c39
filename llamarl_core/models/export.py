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
from .step_checkpoint import is_step_checkpoint, step_shapes
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


def export_checkpoint(src, out, dtype: torch.dtype, max_shard_bytes: int = 5 * 2**30) -> Path:
    """Write `src` (a run's step_<N>, or a Hugging Face directory such as checkpoints/final)
    as a Hugging Face directory at `out` with weights in `dtype`. Raises (ValueError, KeyError,
    FileNotFoundError, FileExistsError) naming the file before anything is written."""
    src, out = Path(src), Path(out)
    check_out_dir(out)
    check_checkpoint(src)  # config.json against the weights' shapes, shard sizes: headers only
    tokenizer = load_tokenizer(src)  # an export without its tokenizer is not a usable model
    model, args = build_empty(src)  # meta device: the shapes, no memory
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}  # a tied head appears once
    order = _stored_order(src, shapes)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.parent / f".{out.name}.partial-{os.getpid()}"
    try:
        save_streamed(checkpoint_tensors(src, args, shapes), {n: shapes[n] for n in order}, dtype, args,
                      tokenizer, partial, max_shard_bytes)
        os.replace(partial, out)  # onto an absent or empty directory
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return out
