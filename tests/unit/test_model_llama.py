"""The Llama module: published sizes, shapes, RoPE scaling and causality."""
import math

import pytest
import torch

from llamarl_core.models import PRESETS, Llama, ModelArgs, get_preset
from llamarl_core.models.rope import rope_inv_freq

TINY = ModelArgs(vocab_size=50, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=48, max_seq_len=64)


@pytest.mark.parametrize("preset,published", [("llama3-8b", 8.03e9), ("llama3-70b", 70.6e9),
                                              ("llama3.1-405b", 405.9e9)])
def test_published_presets_built_on_meta_match_published_parameter_counts(preset, published):
    with torch.device("meta"):
        model = Llama(get_preset(preset))
    count = sum(p.numel() for p in model.parameters())
    assert abs(count - published) / published < 0.005
    assert count == get_preset(preset).num_params()


@pytest.mark.parametrize("preset", ["tiny-2m", "tiny-20m", "tiny-100m"])
def test_tiny_presets_parameter_count_equals_args_formula(preset):
    with torch.device("meta"):
        model = Llama(PRESETS[preset])
    assert sum(p.numel() for p in model.parameters()) == PRESETS[preset].num_params()


def test_tied_embeddings_share_one_tensor_and_count_once():
    args = ModelArgs(**{**TINY.to_dict(), "tie_embeddings": True})
    model = Llama(args)
    assert model.output.weight is model.tok_embeddings.weight
    # 50*32 embedding counted once: num_params drops by exactly vocab*dim = 1600.
    assert args.num_params() == TINY.num_params() - 50 * 32
    assert sum(p.numel() for p in model.parameters()) == args.num_params()


def test_forward_returns_float_logits_of_shape_batch_time_vocab():
    model = Llama(TINY)
    logits = model(torch.randint(0, 50, (3, 7)))
    assert logits.shape == (3, 7, 50) and logits.dtype == torch.float32


def test_logits_at_a_position_do_not_depend_on_later_tokens():
    torch.manual_seed(0)
    model = Llama(TINY).eval()
    ids = torch.randint(0, 50, (1, 10))
    changed = ids.clone()
    changed[0, 6:] = (changed[0, 6:] + 1) % 50
    with torch.no_grad():
        torch.testing.assert_close(model(ids)[:, :6], model(changed)[:, :6])


def test_llama3_rope_scaling_divides_low_frequencies_and_keeps_high_ones():
    scaling = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}
    plain = rope_inv_freq(128, 500000.0)
    scaled = rope_inv_freq(128, 500000.0, scaling)
    wavelen = 2 * math.pi / plain
    # wavelength < 8192/4 = 2048: unchanged; > 8192/1: divided by factor 8.
    high, low = wavelen < 2048, wavelen > 8192
    torch.testing.assert_close(scaled[high], plain[high])
    torch.testing.assert_close(scaled[low], plain[low] / 8.0)
    # In between, smooth = (8192/wavelen - 1) / 3 interpolates between /8 and /1.
    mid = ~high & ~low
    smooth = (8192 / wavelen[mid] - 1.0) / 3.0
    torch.testing.assert_close(scaled[mid], (1 - smooth) * plain[mid] / 8 + smooth * plain[mid])
    assert high.any() and low.any() and mid.any()


def test_invalid_head_configuration_is_rejected_with_the_numbers():
    with pytest.raises(ValueError, match="n_kv_heads=3"):
        Llama(ModelArgs(vocab_size=10, dim=32, n_layers=1, n_heads=4, n_kv_heads=3, ffn_dim=8))


def test_one_training_step_changes_every_parameter():
    torch.manual_seed(0)
    model = Llama(TINY)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    ids = torch.randint(0, 50, (2, 9))
    logits = model(ids[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 50), ids[:, 1:].reshape(-1))
    loss.backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    unchanged = [n for n, p in model.named_parameters() if torch.equal(p, before[n])]
    assert unchanged == []


def test_inference_and_training_forwards_give_the_same_logits():
    torch.manual_seed(0)
    model = Llama(TINY)
    ids = torch.randint(0, 50, (2, 9))
    with torch.no_grad():  # the in-place inference path
        fast = model(ids)
    torch.testing.assert_close(model(ids).detach(), fast)
