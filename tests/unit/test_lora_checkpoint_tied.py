"""A LoRA step checkpoint of a model with a tied head (SmolLM2, Qwen2.5-0.5B) holds the adapters
alone: torch's `ignore_frozen_params` lets the tie's second name (`output.weight`) through."""
from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch
import torch.distributed.checkpoint as dcp

from llamarl_core.checkpoint import checkpoints
from llamarl_core.models.args import get_preset
from llamarl_core.models.checkpoint_check import check_checkpoint
from llamarl_core.models.llama import Llama
from llamarl_core.models.lora import apply_lora, is_adapter


def _model():
    torch.manual_seed(0)
    model = Llama(dataclasses.replace(get_preset("tiny-2m"), tie_embeddings=True))
    return apply_lora(model, 4, 2.0, ["wq", "wv"], seed=0)


def test_a_tied_lora_model_saves_only_its_adapters_and_loads_them_back(tmp_path):
    model = _model()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("lora_B.weight"):
                p.normal_()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
    path = tmp_path / "checkpoints" / "step_1"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.distributed is disabled ... single process"
        checkpoints.save(str(path), model, opt, None, 0, {"step": 1}, 0, str(tmp_path))
        keys = dcp.FileSystemReader(str(path / "trainer")).read_metadata().state_dict_metadata
        saved = {k.split(".", 1)[1] for k in keys if k.startswith("model.")}
        assert saved == {n for n, _ in model.named_parameters() if is_adapter(n)}  # 2 targets x 3 layers x A, B
        assert len(saved) == 12
        fresh = _model()
        checkpoints.load(str(path), fresh, torch.optim.AdamW([p for p in fresh.parameters() if p.requires_grad]),
                         None, 0)
    for (n, a), (_, b) in zip(model.named_parameters(), fresh.named_parameters()):
        assert torch.equal(a, b), n


def test_a_lora_step_named_as_a_model_is_refused_with_the_export_command(tmp_path):
    model = _model()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
    path = tmp_path / "checkpoints" / "step_1"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        checkpoints.save(str(path), model, opt, None, 0, {"step": 1}, 0, str(tmp_path))
    with pytest.raises(ValueError, match=r"holds the adapters alone.*llamarl export .*step_1 OUT --merged"):
        check_checkpoint(path)
