"""Hugging Face checkpoints: `config.json` + safetensors (sharded with an index when large),
and llamarl's resumable `checkpoints/step_<N>/` (config.json beside the trainer's DCP shards,
read tensor by tensor by step_checkpoint.py), so every checkpoint a run writes is a model.

Loading is safe by construction: safetensors files, or legacy `pytorch_model*.bin` through
`torch.load(weights_only=True)` -- never arbitrary pickles. Every failure names the file
(missing/corrupt shard) or the tensor (missing key, unexpected key, shape mismatch).
The model is built on the meta device and materialised once in the target dtype, so a
checkpoint is never held twice in memory.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Iterable, Iterator

import torch

from .hf_config import args_from_hf_config, hf_config_from_args, read_config
from .args import ModelArgs
from .llama import Llama
from .meta import meta_device
from .step_checkpoint import is_step_checkpoint, step_tensors
from .tokenizer import load_tokenizer

_LAYER_NAMES = {
    "self_attn.q_proj": "attention.wq", "self_attn.k_proj": "attention.wk",
    "self_attn.v_proj": "attention.wv", "self_attn.o_proj": "attention.wo",
    "self_attn.q_norm": "attention.q_norm", "self_attn.k_norm": "attention.k_norm",
    "mlp.gate_proj": "feed_forward.w1", "mlp.down_proj": "feed_forward.w2",
    "mlp.up_proj": "feed_forward.w3",
    "input_layernorm": "attention_norm", "post_attention_layernorm": "ffn_norm",
}
_TOP_NAMES = {"model.embed_tokens.weight": "tok_embeddings.weight",
              "model.norm.weight": "norm.weight", "lm_head.weight": "output.weight"}
_LAYER_RE = re.compile(r"^model\.layers\.(\d+)\.(.+)\.(weight|bias)$")
_IGNORED_RE = re.compile(r"rotary_emb\.inv_freq$")


def hf_to_ours(name: str) -> str | None:
    if name in _TOP_NAMES:
        return _TOP_NAMES[name]
    match = _LAYER_RE.match(name)
    if match and match.group(2) in _LAYER_NAMES:
        return f"layers.{match.group(1)}.{_LAYER_NAMES[match.group(2)]}.{match.group(3)}"
    return None


def ours_to_hf(name: str) -> str:
    for hf, ours in _TOP_NAMES.items():
        if name == ours:
            return hf
    parts = name.split(".")  # layers.{i}.<module path>.weight|bias
    inner = ".".join(parts[2:-1])
    for hf, ours in _LAYER_NAMES.items():
        if inner == ours:
            return f"model.layers.{parts[1]}.{hf}.{parts[-1]}"
    raise KeyError(f"parameter {name!r} has no Hugging Face name")


def _weight_files(path: Path) -> list[Path]:
    for index_name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        index = path / index_name
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text())["weight_map"]
            except (json.JSONDecodeError, KeyError) as err:
                raise ValueError(f"{index}: not a valid shard index ({err})") from err
            return [path / name for name in sorted(set(weight_map.values()))]
    for single in ("model.safetensors", "pytorch_model.bin"):
        if (path / single).is_file():
            return [path / single]
    raise FileNotFoundError(f"no model.safetensors(.index.json) or pytorch_model.bin in {path}")


def _iter_tensors(files: list[Path]) -> Iterator[tuple[str, torch.Tensor, Path]]:
    from safetensors import safe_open

    for file in files:
        if not file.is_file():
            raise FileNotFoundError(f"checkpoint shard {file} is missing")
        try:
            if file.suffix == ".safetensors":
                with safe_open(str(file), framework="pt") as handle:
                    for name in handle.keys():
                        yield name, handle.get_tensor(name), file
            else:
                for name, tensor in torch.load(file, map_location="cpu", weights_only=True).items():
                    yield name, tensor, file
        except Exception as err:  # safetensors/pickle errors have no common base class
            raise ValueError(f"checkpoint shard {file} is corrupt or unreadable: {err}") from err


def build_empty(path, device: str | torch.device = "meta"):
    """(model with uninitialised weights on `device`, args) from a checkpoint's config.json."""
    path = Path(path)
    args = args_from_hf_config(read_config(path), source=str(path / "config.json"))
    with meta_device() if torch.device(device).type == "meta" else torch.device(device):
        model = Llama(args)
    return model, args


def _named_tensors(path: Path) -> Iterator[tuple[str, str | None, torch.Tensor, Path]]:
    """(name in the files, our name or None, tensor, file) for every stored tensor."""
    if is_step_checkpoint(path):
        yield from step_tensors(path)
        return
    for hf_name, tensor, file in _iter_tensors(_weight_files(path)):
        if not _IGNORED_RE.search(hf_name):
            yield hf_name, hf_to_ours(hf_name), tensor, file


def checkpoint_tensors(path, args, shapes: dict[str, tuple]) -> Iterator[tuple[str, torch.Tensor]]:
    """(our parameter name, tensor) for each weight, one tensor at a time, checked by name and
    shape against `shapes` (the full, unsharded shapes); raises if any parameter is missing.
    `path` is a Hugging Face directory or a run's `checkpoints/step_<N>`."""
    path = Path(path)
    loaded: set[str] = set()
    for stored, name, tensor, file in _named_tensors(path):
        if args.tie_embeddings and name == "output.weight":
            continue  # some tied checkpoints still store lm_head; the embedding wins
        if name is None or name not in shapes:
            raise KeyError(f"{file}: unexpected tensor {stored!r} for a {args.family} checkpoint "
                           f"of this config.json")
        if tuple(tensor.shape) != tuple(shapes[name]):
            raise ValueError(f"{file}: tensor {stored!r} has shape {tuple(tensor.shape)}, "
                             f"config.json implies {tuple(shapes[name])}")
        loaded.add(name)
        yield name, tensor
    missing = sorted(set(shapes) - loaded)
    if missing:
        hf_missing = [ours_to_hf(name) for name in missing]
        raise KeyError(f"checkpoint {path} lacks {len(missing)} tensors, e.g. {hf_missing[:5]}")


def load_pretrained(path, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"):
    """Load (model, tokenizer) from a Hugging Face checkpoint directory of any family `Llama`
    builds, or from a run's `checkpoints/step_<N>`. A model-only directory (no tokenizer
    file) loads too; its tokenizer errors on first use."""
    path = Path(path)
    model, args = build_empty(path)
    model = model.to(dtype=dtype).to_empty(device=device)
    if args.tie_embeddings:  # to_empty breaks the tie; restore it
        model.output.weight = model.tok_embeddings.weight
    params = dict(model.named_parameters())  # tied weights appear once (tok_embeddings)
    with torch.no_grad():
        for name, tensor in checkpoint_tensors(path, args, {n: p.shape for n, p in params.items()}):
            params[name].copy_(tensor.to(dtype))
    return model, load_tokenizer(path, required=False)


def save_pretrained(model: Llama, tokenizer, path, max_shard_bytes: int = 5 * 2**30,
                    dtype: torch.dtype | None = None) -> None:
    """Write config.json, safetensors shard(s) (+ index when more than one) and the tokenizer;
    weights in `dtype` (`export.dtype`, models/export.py), else the parameters' own."""
    params = list(model.named_parameters())  # tied output weight is skipped (deduplicated)
    dtype = dtype or params[0][1].dtype
    save_streamed(((n, p.detach()) for n, p in params), {n: tuple(p.shape) for n, p in params}, dtype,
                  model.args, tokenizer, path, max_shard_bytes)


def save_streamed(tensors: Iterable[tuple[str, torch.Tensor]], shapes: dict[str, tuple[int, ...]],
                  dtype: torch.dtype, args: ModelArgs, tokenizer, path, max_shard_bytes: int = 5 * 2**30) -> None:
    """`save_pretrained` from tensors that arrive one at a time, in `shapes`' order (for example
    gathered from FSDP shards): the shard layout is fixed from the shapes first, so at most one
    shard file's tensors are held on the host at once, never the whole model."""
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    itemsize = torch.empty((), dtype=dtype).element_size()
    sizes = {ours_to_hf(n): math.prod(s) * itemsize for n, s in shapes.items()}
    layout: list[list[str]] = [[]]
    shard_bytes = 0
    for name, size in sizes.items():
        if layout[-1] and shard_bytes + size > max_shard_bytes:
            layout.append([])
            shard_bytes = 0
        layout[-1].append(name)
        shard_bytes += size
    files = ["model.safetensors"] if len(layout) == 1 else \
        [f"model-{i + 1:05d}-of-{len(layout):05d}.safetensors" for i in range(len(layout))]
    stream = iter(tensors)
    for names, file_name in zip(layout, files):
        shard = {}
        for want in names:
            name, tensor = next(stream)
            if ours_to_hf(name) != want:
                raise ValueError(f"save_streamed: got tensor {name!r} where {want!r} was expected (order differs)")
            shard[want] = tensor.to(device="cpu", dtype=dtype).contiguous()
        save_file(shard, str(path / file_name), metadata={"format": "pt"})
    if len(layout) > 1:
        weight_map = {name: f for names, f in zip(layout, files) for name in names}
        index = {"metadata": {"total_size": sum(sizes.values())}, "weight_map": weight_map}
        (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    _write_config(path, args, tokenizer, dtype)


def save_model_files(path, args: ModelArgs, tokenizer, dtype: torch.dtype) -> None:
    """config.json and the tokenizer, as an export writes them, without weights (a run's
    `checkpoints/step_<N>/` beside its DCP shards, which `load_pretrained` then reads)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    _write_config(path, args, tokenizer, dtype)


def _write_config(path: Path, args: ModelArgs, tokenizer, dtype: torch.dtype) -> None:
    dtype_name = str(dtype).removeprefix("torch.")
    config = hf_config_from_args(args, tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id, dtype_name)
    (path / "config.json").write_text(json.dumps(config, indent=2))
    tokenizer.save(path)
