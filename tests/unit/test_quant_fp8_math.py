"""fp8 e4m3 weight-only quantization math and the token-level KL, on the CPU (values by hand)."""
import math

import pytest
import torch

from llamarl_core.generation.quant import FP8_MAX, QuantizedLinear, _fp8_scaled_mm, token_kl
from llamarl_core.generation.quant_probe import QuantKL
from llamarl_core.models import Llama, ModelArgs
from llamarl_core.wire.rollout import Rollout


def test_fp8_per_channel_scale_maps_each_rows_max_to_448_and_rounds_to_e4m3():
    w = torch.tensor([[1.0, -0.5, 0.3], [0.0, 2.0, 0.01]])
    q = QuantizedLinear(w, "fp8")
    assert q.q.dtype == torch.float8_e4m3fn
    assert q.scale.tolist() == pytest.approx([1 / 448, 2 / 448])
    # Row 0: 1.0 -> 448 and -0.5 -> -224 exactly; 0.3 -> 134.4, and e4m3 steps by 16 in
    # [128, 256), so it rounds to 128 (0.2857 after dequantizing).
    assert q.q[0].float().tolist() == [448.0, -224.0, 128.0]
    # Row 1: 0.01 -> 2.24, which e4m3 holds to 1/8 in [2, 4): 2.25.
    assert q.q[1].float().tolist() == [0.0, 448.0, 2.25]
    assert q.dequantized(torch.float32)[0, 2].item() == pytest.approx(128 / 448)


def test_fp8_dequantized_weights_stay_within_half_a_step_of_three_mantissa_bits():
    torch.manual_seed(0)
    w = torch.randn(32, 64)
    q = QuantizedLinear(w, "fp8")
    err = (q.dequantized(torch.float32) - w).abs()
    # Normal e4m3 numbers keep 3 mantissa bits: relative error <= 2^-4; below the smallest
    # normal (2^-6) the spacing is 2^-9, so the absolute error is <= 2^-10 x scale.
    bound = torch.maximum(w.abs() * 2 ** -4, q.scale[:, None] * 2 ** -10)
    assert (err <= bound + 1e-7).all()


def test_fp8_scaled_mm_equals_the_same_arithmetic_done_by_hand():
    torch.manual_seed(0)
    w, x = torch.randn(32, 64), torch.randn(5, 64)
    q = QuantizedLinear(w, "fp8")
    try:
        y = _fp8_scaled_mm(x, q.q, q.scale)
    except (RuntimeError, NotImplementedError) as e:
        pytest.skip(f"this torch build has no CPU _scaled_mm for e4m3: {e}")
    x_scale = x.abs().amax(1, keepdim=True) / FP8_MAX  # [5, 1] per-token activation scale
    xq = (x / x_scale).to(torch.float8_e4m3fn).float() * x_scale
    ref = xq @ q.dequantized(torch.float32).T  # [5, 32]
    torch.testing.assert_close(y, ref, rtol=2 ** -7, atol=1e-2)  # bf16 output rounding


def test_token_kl_of_two_hand_distributions_and_the_mask():
    # p = [1/2, 1/2], q = [1/4, 3/4]: KL(p||q) = 1/2 ln 2 + 1/2 ln(2/3) = 1/2 ln(4/3).
    full = torch.log(torch.tensor([[[0.5, 0.5], [0.5, 0.5]]]))  # [1, 2, 2]
    quant = torch.log(torch.tensor([[[0.25, 0.75], [0.5, 0.5]]]))
    assert token_kl(full, quant) == pytest.approx(0.5 * math.log(4 / 3) / 2)
    assert token_kl(full, quant, torch.tensor([[True, False]])) == pytest.approx(0.5 * math.log(4 / 3))
    assert token_kl(full, full) == 0.0


ARGS = ModelArgs(vocab_size=260, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96, max_seq_len=64)


def _rollout(n=2):
    torch.manual_seed(1)
    tokens = torch.randint(0, 256, (n, 12))
    return Rollout(tokens, torch.tensor([3, 5])[:n], torch.tensor([6, 2])[:n], torch.zeros(n, 8),
                   torch.zeros(n), torch.arange(n), 0, 0, 0)


def test_quant_probe_measures_once_per_version_on_completion_positions():
    torch.manual_seed(0)
    model = Llama(ARGS).eval()
    probe = QuantKL(model, "int8")
    probe.measure(_rollout(), version=3)
    first = probe.stats()["quant_kl"]
    assert 0.0 < first < 1e-3
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)
    probe.measure(_rollout(), version=3)  # same version: not measured again
    assert probe.stats()["quant_kl"] == first
    probe.measure(_rollout(), version=4)
    assert probe.stats()["quant_kl"] != first
    assert QuantKL(model, "none").stats() == {}
