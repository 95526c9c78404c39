"""Issue #46: one function defines the sampling distribution. The μ the engine's sampler reports
for the tokens it draws equals the trainer's π of those tokens on the same logits (to 1e-6),
and both equal a by-hand reference: softmax(logits / T), top-k, top-p, renormalised."""
import math

import pytest
import torch

from llamarl_core.generation import sampling
from llamarl_core.generation.params import SamplingParams
from llamarl_core.generation.sampling import chunked_policy_logprobs, sample_next

V, D = 300, 16


def _reference_logprob(row: list[float], token: int, temperature: float, top_k: int, top_p: float) -> float:
    """log p(token) by the definition, in float64 Python: softmax(row / T); keep the k best;
    renormalise; keep tokens, best first, while the mass before them is <= top_p; renormalise.
    Greedy (T = 0) reports log softmax(row) at T = 1. -inf outside the kept set."""
    t = temperature or 1.0
    z = [x / t for x in row]
    m = max(z)
    p = [math.exp(x - m) for x in z]
    p = [x / sum(p) for x in p]
    order = sorted(range(len(p)), key=lambda i: -p[i])
    kept = order[:top_k] if temperature and top_k else order
    if temperature and top_p < 1.0:
        mass = sum(p[i] for i in kept)
        before, nucleus = 0.0, []
        for i in kept:
            if before > top_p:
                break
            nucleus.append(i)
            before += p[i] / mass
        kept = nucleus
    if token not in kept:
        return -math.inf
    return math.log(p[token] / sum(p[i] for i in kept))


CASES = {"T=0.7": (0.7, 0, 1.0), "top_k=5": (1.0, 5, 1.0), "top_p=0.9": (1.0, 0, 0.9),
         "T=0.7,top_k=5,top_p=0.9": (0.7, 5, 0.9), "T=1.3,top_k=40,top_p=0.8": (1.3, 40, 0.8),
         "greedy": (0.0, 0, 1.0)}


@pytest.mark.parametrize("temperature,top_k,top_p", CASES.values(), ids=CASES.keys())
def test_the_samplers_mu_is_the_trainers_pi_and_the_by_hand_distribution(temperature, top_k, top_p):
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(4, 6, D, generator=g)                          # [B, T, D]
    head = torch.nn.Linear(D, V, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.randn(V, D, generator=g) * 0.6)           # logits ~ N(0, 2.4^2): truncation bites
        logits = head(hidden)                                             # [B, T, V]
    params = SamplingParams(max_new_tokens=1, temperature=temperature, top_p=top_p, top_k=top_k)
    draws = [sample_next(logits[:, t], params, torch.Generator().manual_seed(t)) for t in range(6)]
    tokens = torch.stack([tok for tok, _ in draws], dim=1)                # [B, T]
    mu = torch.stack([logp for _, logp in draws], dim=1)                  # [B, T]
    # the trainer scores greedy completions at T = 1 (it refuses T = 0: no distribution to train)
    t_pi = temperature or 1.0
    k_pi, p_pi = (top_k, top_p) if temperature else (0, 1.0)
    with torch.no_grad():
        pi, _, _ = chunked_policy_logprobs(hidden, head, tokens, t_pi, k_pi, p_pi,
                                           chunk_bytes=4 * V * 4 * 2)     # 2 positions a chunk: 3 chunks
    torch.testing.assert_close(pi, mu, atol=1e-6, rtol=0)
    want = torch.tensor([[_reference_logprob(logits[b, t].tolist(), int(tokens[b, t]), temperature, top_k, top_p)
                          for t in range(6)] for b in range(4)])
    assert torch.isfinite(want).all()  # every drawn token is inside the kept set
    torch.testing.assert_close(mu.double(), want.double(), atol=1e-5, rtol=0)
    if not temperature:
        assert torch.equal(tokens, logits.argmax(-1))


def test_a_truncated_distribution_is_really_truncated_by_hand():
    # probabilities 0.4, 0.3, 0.2, 0.1 at T = 1; top-k 3 keeps 0.4/0.3/0.2 -> 4/9, 3/9, 2/9;
    # top-p 0.6: mass before is 0, 4/9, 7/9 -> the third goes: 4/7, 3/7. Tokens 2 and 3 are scored
    # log p_T - log(kept mass) = log(0.2 / 0.7), log(0.1 / 0.7): finite, for stale tokens
    logits = torch.tensor([0.4, 0.3, 0.2, 0.1]).log()
    _, logp = sampling.sampling_logprobs(logits.expand(4, 4), 1.0, 3, 0.6, tokens=torch.arange(4))
    torch.testing.assert_close(logp.exp(), torch.tensor([4 / 7, 3 / 7, 2 / 7, 1 / 7]))
    tokens, _ = sample_next(logits.expand(2000, 4), SamplingParams(1, 1.0, 0.6, 3), torch.Generator().manual_seed(0))
    assert set(tokens.tolist()) == {0, 1}


def test_sampler_and_trainer_both_go_through_the_one_function(monkeypatch):
    calls = []
    one = sampling.sampling_logprobs
    monkeypatch.setattr(sampling, "sampling_logprobs", lambda *a, **k: calls.append(k) or one(*a, **k))
    logits = torch.randn(2, 3, 7)
    sample_next(logits[:, 0], SamplingParams(1, 0.7, 0.9, 3), torch.Generator().manual_seed(0))
    head = torch.nn.Linear(5, 7, bias=False)
    chunked_policy_logprobs(torch.randn(2, 3, 5), head, torch.zeros(2, 3, dtype=torch.long), 0.7, 3, 0.9)
    assert [sorted(k) for k in calls] == [["u"], ["tokens"]]
