"""PEFT adapter directories in and out: `adapter_config.json` + `adapter_model.safetensors`.

Our LoRA leaves are PEFT's (models/lora.py): `layers.0.attention.wq.lora_A.weight` is PEFT's
`base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`, the module part mapped by
checkpoint.py's Hugging Face names. So a PEFT adapter is our adapter tensors renamed, plus a
JSON config; `peft` itself is not needed to write or read one (the tests check that PEFT
loads what is written here and that ours loads what PEFT writes, with the same logits).

Reading is safe and strict: JSON and safetensors only (no pickle), and an adapter whose
arithmetic is not ours is refused with one line naming the file and the field or key: rsLoRA
(s = alpha/√r), DoRA, extra trained modules, trained biases, per-module ranks or alphas, or
any tensor we have no layer for. Targets are read from the tensors, which are the truth
(`target_modules` may be a regex or `all-linear`).
"""
from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from llamarl_core.config.choices import LORA_TARGETS, PEFT_TARGETS

from .checkpoint import hf_to_ours, ours_to_hf
from .lora import ADAPTER_LEAVES, TARGET_PATHS, adapter_target, copy_adapters, is_adapter

CONFIG_FILE, WEIGHTS_FILE = "adapter_config.json", "adapter_model.safetensors"
PEFT_PREFIX = "base_model.model."  # PeftModelForCausalLM -> LoraModel -> the HF model
HF_TARGETS = {ours: hf for hf, ours in PEFT_TARGETS.items()}
# adapter_config.json fields that change what the adapter computes or trains beyond W + s·B@A
# on our projections: refused unless absent or falsy (bias: unless "none")
UNSUPPORTED = ("use_rslora", "use_dora", "modules_to_save", "rank_pattern", "alpha_pattern",
               "fan_in_fan_out", "lora_bias", "use_qalora", "alora_invocation_tokens",
               "layer_replication", "trainable_token_indices", "target_parameters")


@dataclass(frozen=True)
class AdapterSpec:
    """What an adapter directory says about itself, in our terms."""

    rank: int
    alpha: float
    dropout: float
    targets: tuple[str, ...]  # our projection names, in LORA_TARGETS order
    base_model: str | None = None  # base_model_name_or_path

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


def peft_key(name: str) -> str:
    """`layers.0.attention.wq.lora_A.weight` -> `base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`."""
    module, leaf = adapter_target(name), name[len(adapter_target(name)) + 1:]
    return f"{PEFT_PREFIX}{ours_to_hf(module + '.weight').removesuffix('.weight')}.{leaf}"


def our_name(key: str) -> str | None:
    """PEFT's key -> our adapter name, or None for a tensor we have no place for."""
    leaf = next((lf for lf in ADAPTER_LEAVES if key.endswith("." + lf)), None)
    if leaf is None or not key.startswith(PEFT_PREFIX):
        return None
    ours = hf_to_ours(key[len(PEFT_PREFIX):-len(leaf)] + "weight")
    if ours is None or ours.rsplit(".", 2)[-2] not in TARGET_PATHS:
        return None
    return ours.removesuffix(".weight") + "." + leaf


def _target_of(name: str) -> str:
    """`layers.0.attention.wq.lora_A.weight` -> `wq`."""
    return adapter_target(name).rsplit(".", 1)[-1]


def _check_shapes(tensors: dict[str, torch.Tensor], rank: int, where: str) -> None:
    for name, t in tensors.items():
        r_dim = 0 if name.endswith("lora_A.weight") else 1
        if t.dim() != 2 or t.shape[r_dim] != rank:
            raise ValueError(f"{where}: {name} has shape {tuple(t.shape)}; rank {rank} needs "
                             f"{'[r, in]' if r_dim == 0 else '[out, r]'} with r = {rank}")
        pair = name[:-len("lora_A.weight")] + ("lora_B.weight" if r_dim == 0 else "lora_A.weight")
        if pair not in tensors:
            raise ValueError(f"{where}: {name} has no {pair.rsplit('.', 2)[-2]} beside it")


def save_adapter(model_or_tensors, lora_cfg, base_model_path, out_dir, dtype: torch.dtype | None = None) -> Path:
    """Write our adapters (a model with LoRA layers, or {our adapter name: tensor}) as a PEFT
    adapter directory at `out_dir`. `lora_cfg`: rank, alpha, dropout, target_modules (our
    `model.lora`, or an AdapterSpec); `dtype`: the tensors' own when None. Written into a hidden
    sibling and renamed into place; a non-empty `out_dir` is refused."""
    from safetensors.torch import save_file

    from .export import check_out_dir

    if isinstance(model_or_tensors, dict):
        tensors = dict(model_or_tensors)
    else:
        tensors = {n: p.detach() for n, p in model_or_tensors.named_parameters() if is_adapter(n)}
    targets = tuple(getattr(lora_cfg, "target_modules", None) or lora_cfg.targets)
    stray = [n for n in tensors if not is_adapter(n) or _target_of(n) not in targets]
    if stray or not tensors:
        raise ValueError(f"save_adapter: {stray[0] if stray else 'no adapter tensors'}: not an adapter "
                         f"of the targets {', '.join(targets)}")
    _check_shapes(tensors, lora_cfg.rank, "save_adapter")
    config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": lora_cfg.rank, "lora_alpha": lora_cfg.alpha,
        "lora_dropout": lora_cfg.dropout, "target_modules": sorted(HF_TARGETS[t] for t in set(map(_target_of, tensors))),
        "bias": "none", "base_model_name_or_path": str(base_model_path) if base_model_path else None,
        "inference_mode": True, "init_lora_weights": True, "fan_in_fan_out": False, "use_rslora": False,
        "use_dora": False, "modules_to_save": None, "rank_pattern": {}, "alpha_pattern": {},
        "layers_to_transform": None, "layers_pattern": None,
    }
    out = Path(out_dir)
    check_out_dir(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.parent / f".{out.name}.partial-{os.getpid()}"
    try:
        partial.mkdir()
        save_file({peft_key(n): t.to(device="cpu", dtype=dtype or t.dtype).contiguous() for n, t in tensors.items()},
                  str(partial / WEIGHTS_FILE), metadata={"format": "pt"})
        (partial / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
        os.replace(partial, out)  # onto an absent or empty directory
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return out


def read_adapter_config(path) -> dict:
    """adapter_config.json of a PEFT adapter directory, every unsupported field refused."""
    file = Path(path) / CONFIG_FILE
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{file} is missing: {path} is not a PEFT adapter directory") from None
    except (OSError, ValueError) as e:
        raise ValueError(f"{file}: not a readable JSON adapter config ({e})") from None
    if not isinstance(config, dict) or config.get("peft_type", "LORA") != "LORA":
        raise ValueError(f"{file}: peft_type={config.get('peft_type') if isinstance(config, dict) else None!r}; "
                         f"only LORA adapters are read")
    for key in UNSUPPORTED:
        if config.get(key):
            raise ValueError(f"{file}: {key}={config[key]!r} is not supported (plain LoRA, W + alpha/r·B@A, only)")
    if config.get("bias", "none") != "none":
        raise ValueError(f"{file}: bias={config['bias']!r} is not supported (trained biases); only 'none'")
    rank, alpha, dropout = config.get("r"), config.get("lora_alpha"), config.get("lora_dropout", 0.0)
    if not (isinstance(rank, int) and rank > 0 and isinstance(alpha, (int, float)) and math.isfinite(alpha)
            and alpha > 0 and isinstance(dropout, (int, float)) and 0 <= dropout < 1):
        raise ValueError(f"{file}: r={rank!r}, lora_alpha={alpha!r}, lora_dropout={dropout!r}: expected "
                         f"r a positive integer, lora_alpha > 0, 0 <= lora_dropout < 1")
    return config


def read_adapter(path) -> tuple[AdapterSpec, dict[str, torch.Tensor]]:
    """(what the adapter is, {our adapter name: tensor}) from a PEFT adapter directory."""
    from safetensors import safe_open

    path = Path(path)
    config = read_adapter_config(path)
    file = path / WEIGHTS_FILE
    if not file.is_file():
        legacy = " (adapter_model.bin is a pickle and is not read)" if (path / "adapter_model.bin").exists() else ""
        raise FileNotFoundError(f"{file} is missing{legacy}")
    tensors = {}
    try:
        with safe_open(str(file), framework="pt") as handle:
            for key in handle.keys():
                name = our_name(key)
                if name is None:
                    raise ValueError(f"{file}: tensor {key!r} is not a LoRA A/B of a projection "
                                     f"({', '.join(HF_TARGETS.values())}) of a decoder layer")
                tensors[name] = handle.get_tensor(key)
    except ValueError:
        raise
    except Exception as e:  # safetensors errors have no common base class
        raise ValueError(f"{file} is corrupt or unreadable: {e}") from None
    if not tensors:
        raise ValueError(f"{file} holds no adapter tensors")
    _check_shapes(tensors, config["r"], str(file))
    present = {_target_of(n) for n in tensors}
    spec = AdapterSpec(config["r"], float(config["lora_alpha"]), float(config.get("lora_dropout", 0.0)),
                       tuple(t for t in LORA_TARGETS if t in present), config.get("base_model_name_or_path"))
    return spec, tensors


def check_matches(spec: AdapterSpec, lora, where) -> None:
    """Raise ValueError naming the field where the adapter's rank, alpha or targets differ
    from `lora` (our `model.lora`)."""
    theirs = {"r": spec.rank, "lora_alpha": spec.alpha, "target_modules": set(spec.targets)}
    ours = {"r": lora.rank, "lora_alpha": float(lora.alpha), "target_modules": set(lora.target_modules)}
    for key in theirs:
        if theirs[key] != ours[key]:
            show = (lambda v: ", ".join(t for t in LORA_TARGETS if t in v)) if key == "target_modules" else repr
            raise ValueError(f"{where}: {key} is {show(theirs[key])} in the adapter but {show(ours[key])} in "
                             f"model.lora; set model.lora to the adapter's")


def load_adapter(model, path, lora) -> AdapterSpec:
    """Copy a PEFT adapter's tensors into `model`'s LoRA layers (`apply_lora` done with `lora`,
    our `model.lora`; before any sharding: parameters are copied whole). Raises ValueError naming
    the mismatching field or key; nothing is copied unless everything matches."""
    spec, tensors = adapter_for(model, path, lora)
    copy_adapters(model, tensors)
    return spec


def adapter_for(model, path, lora) -> tuple[AdapterSpec, dict[str, torch.Tensor]]:
    """A PEFT adapter's tensors (our names, whole) checked against `model`'s LoRA layers: rank,
    alpha and targets against `lora`, then every key and shape (the global ones: a sharded
    model's parameters report their full shape). ValueError naming the field or key."""
    spec, tensors = read_adapter(path)
    file = Path(path) / WEIGHTS_FILE
    check_matches(spec, lora, Path(path) / CONFIG_FILE)
    params = {n: p for n, p in model.named_parameters() if is_adapter(n)}
    missing, extra = sorted(set(params) - set(tensors)), sorted(set(tensors) - set(params))
    if missing or extra:
        what = f"lacks {peft_key(missing[0])}" if missing else f"has {peft_key(extra[0])}, which the model has no layer for"
        raise ValueError(f"{file}: {what} ({len(missing)} missing, {len(extra)} unexpected)")
    for name, t in tensors.items():
        if t.shape != params[name].shape:
            raise ValueError(f"{file}: {peft_key(name)} has shape {tuple(t.shape)}, the model's is "
                             f"{tuple(params[name].shape)}")
    return spec, tensors
