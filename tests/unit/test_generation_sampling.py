"""sample_next: truncation rules and the distribution it draws from."""
import math

import torch

from llamarl_core.generation import SamplingParams
from llamarl_core.generation.sampling import sample_next

# probabilities 0.5, 0.3, 0.15, 0.05 (log-probs as logits)
LOGITS = torch.tensor([[math.log(0.5), math.log(0.3), math.log(0.15), math.log(0.05)]])


def _counts(params, n=4000):
    gen = torch.Generator().manual_seed(0)
    tokens, logprobs = sample_next(LOGITS.expand(n, 4), params, gen)
    return torch.bincount(tokens, minlength=4).float() / n, tokens, logprobs


def test_top_p_keeps_the_smallest_prefix_reaching_p():
    # top_p = 0.7: mass before token 1 is 0.5 < 0.7 (kept), before token 2 is 0.8 > 0.7 (dropped)
    freq, _, _ = _counts(SamplingParams(max_new_tokens=1, top_p=0.7))
    assert freq[2] == 0 and freq[3] == 0
    assert abs(freq[0] - 0.5 / 0.8) < 0.03  # renormalised: 0.625 vs 0.375


def test_top_k_two_keeps_the_two_most_likely_tokens():
    freq, _, _ = _counts(SamplingParams(max_new_tokens=1, top_k=2))
    assert freq[2] == 0 and freq[3] == 0 and abs(freq[1] - 0.375) < 0.03


def test_truncated_sampling_reports_log_probs_of_the_renormalised_nucleus():
    freq, tokens, logprobs = _counts(SamplingParams(max_new_tokens=1, top_p=0.7))
    assert abs(freq - torch.tensor([0.625, 0.375, 0.0, 0.0])).max() < 0.03
    # Reported log-prob is under the distribution sampled from: 0.5 / 0.8 for token 0.
    assert torch.allclose(logprobs[tokens == 0], torch.tensor(math.log(0.625)), atol=1e-6)
    freq, _, _ = _counts(SamplingParams(max_new_tokens=1))
    assert abs(freq - torch.tensor([0.5, 0.3, 0.15, 0.05])).max() < 0.03


def test_temperature_sharpens_the_distribution_it_reports():
    # T = 0.5 squares the probabilities: 0.25, 0.09, 0.0225, 0.0025 -> p0 = 0.25 / 0.365
    _, tokens, logprobs = _counts(SamplingParams(max_new_tokens=1, temperature=0.5), n=200)
    expected = math.log(0.25 / (0.25 + 0.09 + 0.0225 + 0.0025))
    assert torch.allclose(logprobs[tokens == 0], torch.tensor(expected), atol=1e-5)


def test_inverse_cdf_across_blocks_draws_the_weights_and_never_a_zero():
    from llamarl_core.generation.sampling import CDF_BLOCK, inverse_cdf
    # 3000 tokens (2 full blocks and a padded third), weight only on 5 of them: 1, 4, 2, 2, 1 of 10
    w = torch.zeros(3000)
    hot = {5: 0.1, CDF_BLOCK - 1: 0.4, CDF_BLOCK: 0.2, 1500: 0.2, 2999: 0.1}
    for i, p in hot.items():
        w[i] = 10 * p
    n = 40000
    tokens = inverse_cdf(w.expand(n, -1), torch.rand(n, dtype=torch.float64, generator=torch.Generator().manual_seed(0)))
    assert set(tokens.tolist()) == set(hot)  # sd of a share <= 0.0025
    freq = torch.bincount(tokens, minlength=3000).double() / n
    assert max(abs(float(freq[i]) - p) for i, p in hot.items()) < 0.012
    # the ends of u: 0 takes the first token with weight, the largest double below 1 the last
    edges = inverse_cdf(w.expand(2, -1), torch.tensor([0.0, 1 - 2 ** -53], dtype=torch.float64))
    assert edges.tolist() == [5, 2999]
