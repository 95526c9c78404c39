"""A model built on the meta device runs no parameter init (models/meta.py): a generator, whose
weights all arrive over the weight sync, then never imports torch._dynamo (~1.5 CPU-s, plus
sympy) at start. Before: `with torch.device("meta")` ran nn.init through torch's Python meta
kernels, whose first call imports it."""
import subprocess
import sys

import pytest
import torch
from torch.nn import init

from llamarl_core.config.schema import ModelConfig
from llamarl_core.models import Llama, get_preset
from llamarl_core.models.build import build_meta_model
from llamarl_core.models.meta import meta_device


def test_a_meta_model_has_the_shapes_of_a_real_one_and_init_is_restored_after():
    before = init.normal_
    meta, _ = build_meta_model(ModelConfig(), dtype="float32")
    assert init.normal_ is before
    torch.manual_seed(0)
    real = Llama(get_preset(ModelConfig().preset))
    shapes = {n: p.shape for n, p in real.named_parameters()}
    assert {n: p.shape for n, p in meta.named_parameters()} == shapes
    assert all(p.is_meta for p in meta.parameters())
    assert 0.015 < real.tok_embeddings.weight.std().item() < 0.025  # a real build is initialised


def test_init_is_restored_when_the_build_fails():
    before = init.normal_
    with pytest.raises(RuntimeError):
        with meta_device():
            raise RuntimeError("a bad config")
    assert init.normal_ is before


def test_building_the_generators_meta_model_does_not_import_torch_dynamo():
    code = ("import sys, torch\n"
            "from llamarl_core.config.schema import ModelConfig\n"
            "from llamarl_core.models.build import build_meta_model\n"
            "build_meta_model(ModelConfig(), dtype='float32')\n"
            "print(sorted(m for m in ('torch._dynamo', 'sympy') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", out.stdout
