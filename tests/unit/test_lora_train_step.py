"""The trainer side of LoRA RL on one process: only the adapters are trained, their gradient is
the hand-derived one, the reference is the base (adapters off), and the merged HF checkpoint
computes the LoRA model's logits."""

import pytest
import torch

from llamarl_core.config.load import load_config
from llamarl_core.executors.learner import Learner
from llamarl_core.executors.pipeline import learner_config
from llamarl_core.executors.train_step import train_on
from llamarl_core.models import ByteTokenizer, Llama, get_preset, load_pretrained, save_streamed, with_overrides
from llamarl_core.models.lora import (LoraLinear, adapters_disabled, apply_lora, hold_base_in, is_adapter,
                                      lora_modules, lora_scales, merge_adapters)
from llamarl_core.wire.rollout import Rollout

TARGETS = ("wq", "wv", "w2")
RANK, ALPHA = 4, 8.0


def _base() -> Llama:
    torch.manual_seed(0)
    return Llama(with_overrides(get_preset("tiny-2m"), dim=32, n_layers=2, n_heads=2, n_kv_heads=2,
                                ffn_dim=64, max_seq_len=32))


def _lora(nonzero_b: bool = False) -> Llama:
    model = apply_lora(_base(), RANK, ALPHA / RANK, TARGETS, seed=3)
    if nonzero_b:  # as after some training: the adapters change the model
        g = torch.Generator().manual_seed(7)
        with torch.no_grad():
            for _, m in lora_modules(model):
                m.lora_B.weight.copy_(torch.randn(m.lora_B.weight.shape, generator=g) * 0.1)
    return model


def _batch(n=8, seed=0) -> Rollout:
    g = torch.Generator().manual_seed(seed)
    prompt_lens = torch.full((n,), 4)
    completion_lens = torch.tensor([1, 12, 3, 7, 12, 2, 5, 9])[:n]
    tokens = torch.zeros(n, 16, dtype=torch.long)
    for r in range(n):
        used = int(prompt_lens[r] + completion_lens[r])
        tokens[r, :used] = torch.randint(3, 200, (used,), generator=g)
    behavior = -torch.rand(n, 15, generator=g)
    return Rollout(tokens, prompt_lens, completion_lens, behavior,
                   torch.tensor([1.0, 0, 0, 1, 1, 0, 1, 0])[:n], torch.arange(n) // 2, 0, 0, 0)


def _learner(model, *overrides, ref_model=None) -> Learner:
    cfg = load_config("cpu_tiny", ["algorithm.group_size=2", "resources.trainer.micro_batch_size=8", *overrides])
    return Learner(model, learner_config(cfg), ref_model)


def test_the_optimizer_holds_only_the_adapters_and_a_step_leaves_the_base_bitwise_unchanged():
    model = _lora()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    learner = _learner(model)
    adapters = {n for n, _ in model.named_parameters() if is_adapter(n)}
    assert len(adapters) == 2 * len(TARGETS) * 2  # A and B of 3 targets in 2 blocks
    names = {id(p): n for n, p in model.named_parameters()}
    assert {names[id(p)] for g in learner.optimizer.param_groups for p in g["params"]} == adapters
    train_on(learner, _batch(), torch.zeros(8))
    assert {names[id(p)] for p in learner.optimizer.state} == adapters  # Adam state: adapters only
    for n, p in model.named_parameters():
        if not is_adapter(n):
            assert torch.equal(p, before[n]), n
        elif n.endswith("lora_B.weight"):
            assert not torch.equal(p, before[n]) and before[n].abs().max() == 0, n  # B = 0 moved


def test_a_lora_linear_gradient_equals_the_hand_derived_one():
    g = torch.Generator().manual_seed(0)
    base = torch.nn.Linear(5, 3, dtype=torch.float64)
    layer = LoraLinear(base, rank=2, scale=1.5)
    layer.weight.requires_grad_(False)
    layer.bias.requires_grad_(False)
    with torch.no_grad():
        layer.lora_A.weight.copy_(torch.randn(2, 5, generator=g))
        layer.lora_B.weight.copy_(torch.randn(3, 2, generator=g))
    x = torch.randn(4, 5, generator=g, dtype=torch.float64)
    dy = torch.randn(4, 3, generator=g, dtype=torch.float64)  # dL/dy for L = sum(y * dy)
    (layer(x) * dy).sum().backward()
    a, b, s = layer.lora_A.weight.detach(), layer.lora_B.weight.detach(), 1.5
    # y = x Wᵀ + s (x Aᵀ) Bᵀ:  dL/dB = s dyᵀ (x Aᵀ)  [3, 2];  dL/dA = s Bᵀ dyᵀ x  [2, 5]
    torch.testing.assert_close(layer.lora_B.weight.grad, s * dy.T @ (x @ a.T), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(layer.lora_A.weight.grad, s * b.T @ dy.T @ x, rtol=1e-12, atol=1e-12)
    assert layer.weight.grad is None


def _merged_copy(lora) -> torch.nn.Module:
    """A plain base model holding `lora`'s merged weights W + s·B@A."""
    merged = _base()
    with torch.no_grad():
        params = dict(merged.named_parameters())
        for name, m in lora_modules(lora):
            params[f"{name}.weight"].copy_(m.merged_weight())
    return merged


def _grads_of_a_step(model, learner) -> dict:
    got = {}
    learner.optimizer.step = lambda: got.update({n: p.grad.clone() for n, p in model.named_parameters()
                                                 if p.grad is not None})
    train_on(learner, _batch(), torch.zeros(8))
    return got


def test_the_rl_loss_gradient_of_the_adapters_follows_from_the_merged_weights_gradient():
    # W' = W + s B A, so dL/dB = s (dL/dW') Aᵀ and dL/dA = s Bᵀ (dL/dW'), with dL/dW' taken from
    # the plain model holding the merged weights, through the same RL loss on the same batch.
    lora = _lora(nonzero_b=True)
    merged = _merged_copy(lora)
    lora_grads = _grads_of_a_step(lora, _learner(lora))
    full_grads = _grads_of_a_step(merged, _learner(merged))
    assert set(lora_grads) == {n for n, _ in lora.named_parameters() if is_adapter(n)}
    for name, m in lora_modules(lora):
        dw, a, b = full_grads[f"{name}.weight"], m.lora_A.weight.detach(), m.lora_B.weight.detach()
        torch.testing.assert_close(lora_grads[f"{name}.lora_B.weight"], m.scale * dw @ a.T, rtol=1e-4, atol=1e-7)
        torch.testing.assert_close(lora_grads[f"{name}.lora_A.weight"], m.scale * b.T @ dw, rtol=1e-4, atol=1e-7)


def test_adapters_off_give_the_base_models_logits_exactly():
    tokens = _batch().tokens
    lora, base = _lora(nonzero_b=True), _base()
    with torch.no_grad(), adapters_disabled(lora):
        off = lora(tokens)
    with torch.no_grad():
        assert torch.equal(off, base(tokens))
        assert not torch.allclose(lora(tokens), off)  # the adapters were on again, and matter


def test_the_kl_to_the_base_is_zero_at_step_0_and_the_separate_reference_otherwise():
    kl = ("algorithm.kl_coef=0.1",)
    fresh = _lora()  # B = 0: the policy is the base
    metrics = train_on(_learner(fresh, *kl), _batch(), torch.zeros(8))
    assert metrics["kl"] == 0.0
    # B != 0: the free reference (adapters off) scores as a separate base model does, with the
    # same policy (the merged weights) on the same batch
    lora = _lora(nonzero_b=True)
    merged = _merged_copy(lora)
    learner = _learner(lora, *kl)
    assert learner.lora_reference is lora and learner.ref_model is None
    got = train_on(learner, _batch(), torch.zeros(8))
    want = train_on(_learner(merged, *kl, ref_model=_base().requires_grad_(False)), _batch(), torch.zeros(8))
    assert got["kl"] > 1e-4
    for key in ("kl", "loss"):
        assert got[key] == pytest.approx(want[key], rel=1e-4), key


def test_the_base_is_held_in_the_compute_dtype_and_the_adapters_in_float32():
    model = hold_base_in(_lora(), torch.bfloat16)
    dtypes = {n: p.dtype for n, p in model.named_parameters()}
    assert all(d == (torch.float32 if is_adapter(n) else torch.bfloat16) for n, d in dtypes.items()), dtypes
    model.layers[0].attention.wq(torch.randn(2, 32, dtype=torch.bfloat16)).float().sum().backward()
    assert model.layers[0].attention.wq.lora_A.weight.grad.dtype == torch.float32


def test_the_merged_checkpoint_computes_the_lora_models_logits(tmp_path):
    lora = _lora(nonzero_b=True)
    shapes = {n: tuple(p.shape) for n, p in lora.named_parameters() if not is_adapter(n)}
    tensors = ((n, p.detach()) for n, p in lora.named_parameters())
    save_streamed(merge_adapters(tensors, lora_scales(lora)), shapes, torch.float32, lora.args, ByteTokenizer(),
                  tmp_path)
    loaded, _ = load_pretrained(tmp_path)
    assert not any("lora" in n for n, _ in loaded.named_parameters())
    tokens = _batch().tokens
    with torch.no_grad():
        torch.testing.assert_close(loaded(tokens), lora(tokens), rtol=1e-5, atol=1e-5)


def test_merging_without_lora_passes_every_tensor_through():
    model = _base()
    out = list(merge_adapters(((n, p) for n, p in model.named_parameters()), lora_scales(model)))
    assert [n for n, _ in out] == [n for n, _ in model.named_parameters()]
    assert all(t is p for (_, t), (_, p) in zip(out, model.named_parameters()))
