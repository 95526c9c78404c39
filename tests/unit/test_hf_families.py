"""Parity with transformers, family by family (Llama-3, SmolLM2-style tied Llama, Qwen2.5, Qwen3,
Mistral), on tiny random checkpoints that transformers builds and saves (tests/hf_tiny.py).

The reference is each family's own `*ForCausalLM` on the same files: logits on a padded batch
(fp32, max abs error <= 1e-5), 32 greedy tokens against `generate`, our export read back by
`AutoModelForCausalLM.from_pretrained` (no missing or unexpected tensor, same logits), and the
engine's sampled log-probs (mu) against the trainer's recomputation (pi)."""
import copy

import pytest
import torch

transformers = pytest.importorskip("transformers")

from hf_tiny import FAMILIES, save_tiny  # noqa: E402

from llamarl_core.generation import GenerationEngine, SamplingParams  # noqa: E402
from llamarl_core.generation.quant import QuantizedLinear  # noqa: E402
from llamarl_core.generation.sampling import sampling_logprobs  # noqa: E402
from llamarl_core.models import load_pretrained, save_pretrained  # noqa: E402

PROMPTS = [[257, 49, 50, 43, 51, 52, 61], [257, 104], [257, 97, 32, 108, 111, 110, 103, 101, 114, 32, 111, 110, 101]]
TOL = 1e-5


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf_families")
    return {f: save_tiny(f, root / f) for f in FAMILIES}


@pytest.fixture(scope="module")
def models(checkpoints):
    """family -> (ours, tokenizer, transformers' model), each loaded once from the same files."""
    out = {}
    for family, path in checkpoints.items():
        ours, tok = load_pretrained(path)
        hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        out[family] = (ours.eval(), tok, hf)
    return out


def _left_padded(prompts, pad=256):
    """ids [B, T], attention mask [B, T] and positions [B, T] of left-padded rows."""
    T = max(map(len, prompts))
    ids = torch.full((len(prompts), T), pad)
    mask = torch.zeros(len(prompts), T, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, T - len(p):], mask[i, T - len(p):] = torch.tensor(p), 1
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_logits_on_a_padded_batch_equal_transformers(models, family):
    ours, _, hf = models[family]
    ids, mask, positions = _left_padded(PROMPTS)
    T = ids.shape[1]
    # Left-padded, as the eval decodes: explicit positions, padding masked out of every query.
    allowed = (torch.ones(T, T, dtype=torch.bool).tril()[None] & mask.bool()[:, None, :])[:, None]
    with torch.no_grad():
        got = ours(ids, positions, attn_mask=allowed)
        want = hf(ids, attention_mask=mask, position_ids=positions).logits
        real = mask.bool()
        assert (got - want)[real].abs().max() <= TOL
        # Right-padded, as the trainer computes pi: plain causal forward, padding only after.
        right = torch.full_like(ids, 256)
        for i, p in enumerate(PROMPTS):
            right[i, :len(p)] = torch.tensor(p)
        got, want = ours(right), hf(right, attention_mask=(right != 256).long()).logits
        for i, p in enumerate(PROMPTS):
            assert (got[i, :len(p)] - want[i, :len(p)]).abs().max() <= TOL


@pytest.mark.parametrize("family", list(FAMILIES))
def test_32_greedy_tokens_equal_transformers_generate(models, family):
    ours, tok, hf = models[family]
    hf.generation_config.eos_token_id = None  # 32 tokens whatever comes out
    completions = GenerationEngine(ours, tok).generate(
        PROMPTS, SamplingParams(max_new_tokens=32, temperature=0.0, ignore_eos=True))
    ids, mask, _ = _left_padded(PROMPTS)
    with torch.no_grad():
        out = hf.generate(ids, attention_mask=mask, max_new_tokens=32, do_sample=False, pad_token_id=256)
    for completion, row in zip(completions, out[:, ids.shape[1]:].tolist()):
        assert completion.token_ids == row
    assert len({tuple(c.token_ids) for c in completions}) == len(PROMPTS)  # not one stuck token


@pytest.mark.parametrize("family", list(FAMILIES))
def test_our_export_loads_in_transformers_with_identical_logits(checkpoints, models, family, tmp_path):
    import json

    ours, tok, _ = models[family]
    save_pretrained(ours, tok, tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    source = json.loads((checkpoints[family] / "config.json").read_text())
    for key in ("model_type", "architectures", "head_dim", "tie_word_embeddings", "rope_parameters"):
        assert written[key] == (source[key] if key != "head_dim" else ours.args.head_dim), key
    hf, info = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32,
                                                                 output_loading_info=True)
    assert type(hf).__name__ == source["architectures"][0]
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    ids = torch.tensor([PROMPTS[0] + PROMPTS[2]])
    with torch.no_grad():
        assert torch.equal(hf.eval()(ids).logits, ours(ids))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_generator_mu_equals_trainer_pi(models, family):
    model, tok, _ = models[family]
    params = SamplingParams(max_new_tokens=24, temperature=0.8, top_p=0.95)
    completions = GenerationEngine(model, tok).generate(PROMPTS, params, seed=3)
    rows = [p + c.token_ids for p, c in zip(PROMPTS, completions)]
    ids = torch.full((len(rows), max(map(len, rows))), 256)
    for i, row in enumerate(rows):
        ids[i, :len(row)] = torch.tensor(row)
    with torch.no_grad():
        _, logp = sampling_logprobs(model(ids)[:, :-1], 0.8, 0, 0.95, tokens=ids[:, 1:])  # [B, L-1]
    for i, (p, c) in enumerate(zip(PROMPTS, completions)):
        assert len(c.token_ids) > 0
        pi = logp[i, len(p) - 1:len(p) - 1 + len(c.token_ids)]
        assert (torch.tensor(c.logprobs) - pi).abs().max() <= TOL


@pytest.mark.parametrize("kind", ["int8", "fp8"])
@pytest.mark.parametrize("family", ["qwen2.5", "qwen3"])
def test_quantized_engine_is_the_model_with_dequantized_weights_and_exact_biases_and_norms(
        models, family, kind):
    model, tok, _ = models[family]
    reference = copy.deepcopy(model)
    with torch.no_grad():
        for name, module in reference.named_modules():
            if isinstance(module, torch.nn.Linear) and name.startswith("layers."):
                module.weight.copy_(QuantizedLinear(module.weight, kind).dequantized(torch.float32))
    params = SamplingParams(max_new_tokens=16, temperature=0.0, ignore_eos=True)
    quantized = GenerationEngine(model, tok, quantization=kind).generate(PROMPTS, params)
    expected = GenerationEngine(reference, tok).generate(PROMPTS, params)
    for q, e in zip(quantized, expected):
        assert q.token_ids == e.token_ids
        assert q.logprobs == pytest.approx(e.logprobs, abs=1e-4)
    # The bias the engine adds is the model's own, not a quantized copy.
    engine = GenerationEngine(model, tok, quantization=kind)
    engine.refresh_weights()
    a = model.layers[0].attention
    if a.wq.bias is not None:
        assert torch.equal(engine.proj["0.qkv"].quantized.bias, torch.cat([a.wq.bias, a.wk.bias, a.wv.bias]))
