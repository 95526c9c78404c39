"""bench/lora_apply.py: the unmerged projections (y = x Wᵀ + s·(x Aᵀ)Bᵀ, wrapping the engine's
own) and the merge into the engine's weights both compute x (W + s·B@A)ᵀ, checked against that
product written out per target; and the engine decodes the same tokens either way."""
import torch

from llamarl_core.bench.lora_apply import base_copy, merge, random_adapters, restore, unmerged_projections
from llamarl_core.config.choices import LORA_TARGETS
from llamarl_core.generation import GenerationEngine, SamplingParams
from llamarl_core.generation.fused import BLOCK_PROJECTIONS
from llamarl_core.models import Llama, get_preset
from llamarl_core.models.tokenizer import ByteTokenizer

RANK, SCALE = 4, 2.0


def _setup(targets=LORA_TARGETS):
    torch.manual_seed(0)
    model = Llama(get_preset("tiny-2m")).eval().requires_grad_(False)
    adapters = random_adapters(model, RANK, targets, seed=1, b_std=0.5)
    engine = GenerationEngine(model, ByteTokenizer(), max_batch_size=4)
    return model, adapters, engine, engine.weights.current()


def _reference(model, base, adapters, i, modules, x):
    """x (W_base + s·B@A)ᵀ per module of the fused projection, stacked on the output axis."""
    outs = []
    for m in modules:
        path = f"layers.{i}.{m}"
        w = base[path] if path in base else model.get_submodule(path).weight
        if path in adapters:
            a, b = adapters[path]
            w = w + SCALE * b @ a
        outs.append(x @ w.T)
    return torch.cat(outs, dim=-1)


def _check_all(model, base, adapters, proj, x_by_dim):
    for i in range(len(model.layers)):
        for key, modules in BLOCK_PROJECTIONS:
            x = x_by_dim[model.layers[i].get_submodule(modules[0]).weight.shape[1]]
            want = _reference(model, base, adapters, i, modules, x)
            torch.testing.assert_close(proj[f"{i}.{key}"](x), want, atol=1e-5, rtol=1e-5)


def test_unmerged_and_merged_projections_both_equal_the_merged_weight_product():
    model, adapters, engine, plain = _setup()
    base = base_copy(model, adapters)
    wrapped = unmerged_projections(plain, model, adapters, SCALE)
    g = torch.Generator().manual_seed(2)
    x_by_dim = {d: torch.randn(5, d, generator=g) for d in (model.args.dim, model.args.ffn_dim)}
    _check_all(model, base, adapters, wrapped, x_by_dim)  # unmerged, on W_base
    # the adapters change the output by far more than the tolerance: the check can fail
    x = x_by_dim[model.args.dim]
    assert (wrapped["0.qkv"](x) - plain["0.qkv"](x)).abs().max() > 0.1
    merge(model, base, adapters, SCALE)  # into the engine's (adopted) storage
    _check_all(model, base, adapters, plain, x_by_dim)
    restore(model, base)
    torch.testing.assert_close(plain["1.w2"](x_by_dim[model.args.ffn_dim]),
                               x_by_dim[model.args.ffn_dim] @ base["layers.1.feed_forward.w2"].T,
                               atol=1e-5, rtol=1e-5)


def test_a_projection_with_some_targets_adapted_leaves_the_others_rows_unchanged():
    model, adapters, engine, plain = _setup(targets=("wk",))  # qkv: only its k rows move
    base = base_copy(model, adapters)
    wrapped = unmerged_projections(plain, model, adapters, SCALE)
    assert wrapped["0.wo"] is plain["0.wo"] and wrapped["0.w13"] is plain["0.w13"]
    x = torch.randn(3, model.args.dim, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(wrapped["2.qkv"](x), _reference(model, base, adapters, 2, BLOCK_PROJECTIONS[0][1], x),
                               atol=1e-5, rtol=1e-5)


def test_the_engine_decodes_the_same_tokens_merged_and_unmerged():
    model, adapters, engine, plain = _setup()
    base = base_copy(model, adapters)
    wrapped = unmerged_projections(plain, model, adapters, SCALE)
    prompts = [list(b"1+2="), list(b"7+6+1="), list(b"hello")]
    params = SamplingParams(max_new_tokens=8, temperature=1.0, ignore_eos=True)
    engine.weights.proj = wrapped
    unmerged = engine.generate(prompts, params, seed=0)
    merge(model, base, adapters, SCALE)
    engine.weights.proj = plain
    merged = engine.generate(prompts, params, seed=0)
    for u, m in zip(unmerged, merged):
        assert u.token_ids == m.token_ids
        torch.testing.assert_close(torch.tensor(u.logprobs), torch.tensor(m.logprobs), atol=1e-4, rtol=1e-4)
