"""A role's model and tokenizer from its `model` section: a checkpoint, or a seeded preset;
on the meta device for a role whose weights all arrive over the weight sync.

Every role builds with the same config and seed (run.seed), so they agree on the initial
weights without sending them.
"""
from __future__ import annotations

import torch

from llamarl_core.config.schema import ModelConfig
from llamarl_core.models.args import get_preset
from llamarl_core.models.checkpoint import build_empty, load_pretrained
from llamarl_core.models.dtypes import TORCH_DTYPES
from llamarl_core.models.llama import Llama
from llamarl_core.models.meta import meta_device
from llamarl_core.models.tokenizer import ByteTokenizer, load_tokenizer


def build_model(model_cfg: ModelConfig, dtype: str, device: str = "cpu", *, seed: int):
    """(model, tokenizer): the checkpoint if given, else a seeded random init of the preset.

    `dtype` is the role's own (`resources.generator.dtype` or `resources.trainer.dtype`);
    `device` the rank's (a checkpoint is materialised there directly). The preset init runs
    on the CPU, so every device starts from the same seeded weights (`seed`: run.seed)."""
    torch_dtype = TORCH_DTYPES[dtype]
    if model_cfg.checkpoint:
        return load_pretrained(model_cfg.checkpoint, dtype=torch_dtype, device=device)
    torch.manual_seed(seed)
    model = Llama(get_preset(model_cfg.preset)).to(device=device, dtype=torch_dtype)
    return model, ByteTokenizer()


def tokenizer_of(model_cfg: ModelConfig):
    """The model's tokenizer: its checkpoint's, or the byte tokenizer of a preset."""
    return load_tokenizer(model_cfg.checkpoint) if model_cfg.checkpoint else ByteTokenizer()


def build_meta_model(model_cfg: ModelConfig, dtype: str):
    """(model on the meta device, tokenizer): shapes only, for a role whose weights all arrive
    over the weight sync (the generators receive version 0 before they generate)."""
    if model_cfg.checkpoint:
        model, _ = build_empty(model_cfg.checkpoint, device="meta")
        tokenizer = load_tokenizer(model_cfg.checkpoint, required=False)
    else:
        with meta_device():  # no init on meta: it would import torch._dynamo (models/meta.py)
            model, tokenizer = Llama(get_preset(model_cfg.preset)), ByteTokenizer()
    return model.to(dtype=TORCH_DTYPES[dtype]), tokenizer


def materialize_zeros(model: torch.nn.Module, device: str) -> torch.nn.Module:
    """Allocate a meta model's (possibly TP-sliced) parameters on `device`, zero-filled."""
    tied = model.output.weight is model.tok_embeddings.weight
    model.to_empty(device=device)
    if tied:  # to_empty gives the two names separate storage; one weight again
        model.output.weight = model.tok_embeddings.weight
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    return model
