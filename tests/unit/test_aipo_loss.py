"""AIPO loss: gradients worked out by hand, on/off-policy equivalence, masking, variants."""
import math

import pytest
import torch

from llamarl_core.algorithms import aipo_loss


def _leaf(values):
    return torch.tensor([values], dtype=torch.float64, requires_grad=True)


def test_token_above_the_cap_gets_gradient_rho_times_advantage():
    # 3 tokens, log pi = [-1, -2, -0.5], log mu = [-1, -2.5, -0.7], A = [1, 1, -2], rho = 1.2.
    # ratios: exp(0) = 1, exp(0.5) = 1.6487 (> rho, truncated to 1.2), exp(0.2) = 1.2214 (> rho).
    # Weights w = [1, 1.2, 1.2]; loss = -(1/3) * sum(w * A * log pi)
    #   = -(1/3) * (1*1*-1 + 1.2*1*-2 + 1.2*-2*-0.5) = -(1/3) * (-1 - 2.4 + 1.2) = 0.7333
    # d loss / d log pi_t = -w_t * A_t / 3 = [-1/3, -0.4, +0.8]
    logprobs = _leaf([-1.0, -2.0, -0.5])
    behavior = torch.tensor([[-1.0, -2.5, -0.7]], dtype=torch.float64)
    advantages = torch.tensor([[1.0, 1.0, -2.0]], dtype=torch.float64)
    loss, metrics = aipo_loss(logprobs, behavior, advantages, torch.ones(1, 3), rho=1.2)
    loss.backward()
    assert loss.item() == pytest.approx(2.2 / 3)
    assert logprobs.grad.tolist()[0] == pytest.approx([-1 / 3, -0.4, 0.8])
    assert metrics["is_truncated_frac"] == pytest.approx(2 / 3)
    assert metrics["is_ratio_max"] == pytest.approx(math.exp(0.5))
    assert metrics["is_ratio_mean"] == pytest.approx((1 + math.exp(0.5) + math.exp(0.2)) / 3)
    # ESS of w = [1, 1.2, 1.2]: (3.4)^2 / (3 * (1 + 1.44 + 1.44)) = 11.56 / 11.64
    assert metrics["ess"] == pytest.approx(11.56 / 11.64)


def test_aipo_with_mu_equal_pi_and_large_rho_has_the_on_policy_gradient():
    torch.manual_seed(0)
    base = torch.randn(4, 6, dtype=torch.float64) - 1.0
    advantages = torch.randn(4, 1, dtype=torch.float64).expand(4, 6)
    mask = (torch.rand(4, 6) > 0.3).double()
    grads = {}
    for kind in ("aipo", "pg"):
        logprobs = base.clone().requires_grad_(True)
        loss, _ = aipo_loss(logprobs, base.clone(), advantages, mask, rho=100.0, kind=kind)
        loss.backward()
        grads[kind] = logprobs.grad
    assert torch.allclose(grads["aipo"], grads["pg"])


def test_masked_tokens_contribute_nothing_to_loss_or_gradient():
    logprobs = _leaf([-1.0, -2.0, -3.0])
    behavior = torch.tensor([[-1.0, -2.0, -9.0]], dtype=torch.float64)  # huge ratio, masked
    advantages = torch.tensor([[2.0, 1.0, 50.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss, metrics = aipo_loss(logprobs, behavior, advantages, mask, rho=2.0)
    loss.backward()
    # loss = -(2*-1 + 1*-2) / 2 = 2; grads [-2/2, -1/2, 0]
    assert loss.item() == pytest.approx(2.0)
    assert logprobs.grad.tolist()[0] == pytest.approx([-1.0, -0.5, 0.0])
    assert metrics["is_ratio_max"] == pytest.approx(1.0)  # the masked ratio e^6 is not seen


def test_sequence_mean_averages_each_sequence_first():
    # seq 0 has 1 token (loss -A*logp = -(1)(-2) = 2), seq 1 has 3 tokens each 1*1 = 1.
    # token_mean = (2 + 3) / 4 = 1.25; sequence_mean = (2 + 1) / 2 = 1.5
    logprobs = torch.tensor([[-2.0, 0, 0], [-1.0, -1.0, -1.0]], requires_grad=True)
    advantages = torch.tensor([[1.0, 0, 0], [1.0, 1.0, 1.0]])
    mask = torch.tensor([[1.0, 0, 0], [1.0, 1.0, 1.0]])
    token, _ = aipo_loss(logprobs, logprobs.detach(), advantages, mask, rho=2.0)
    seq, _ = aipo_loss(logprobs, logprobs.detach(), advantages, mask, rho=2.0,
                       aggregation="sequence_mean")
    assert token.item() == pytest.approx(1.25)
    assert seq.item() == pytest.approx(1.5)


def test_clamp_form_gives_zero_gradient_above_the_cap_and_ratio_weighted_below():
    # log pi - log mu = [0.1, 1.0]; rho = 1.5. Token 0: r = e^0.1 < rho -> loss -r*A,
    # d/dlogpi = -r*A/2 = -e^0.1 * 1 / 2. Token 1: r = e > rho -> constant, gradient 0.
    logprobs = _leaf([-1.0, -1.0])
    behavior = torch.tensor([[-1.1, -2.0]], dtype=torch.float64)
    loss, _ = aipo_loss(logprobs, behavior, torch.ones(1, 2), torch.ones(1, 2),
                        rho=1.5, kind="clamp")
    loss.backward()
    assert logprobs.grad.tolist()[0] == pytest.approx([-math.exp(0.1) / 2, 0.0])


def test_ppo_clipping_stops_gradient_once_the_ratio_leaves_the_trust_region():
    # A > 0, r = e^0.5 > 1 + 0.2: the clipped branch is the min -> zero gradient.
    # A > 0, r = e^0.1 = 1.105 inside: gradient -r*A/2.
    logprobs = _leaf([-0.5, -0.9])
    behavior = torch.tensor([[-1.0, -1.0]], dtype=torch.float64)
    loss, metrics = aipo_loss(logprobs, behavior, torch.ones(1, 2), torch.ones(1, 2),
                              rho=2.0, kind="ppo", clip_eps=0.2)
    loss.backward()
    assert logprobs.grad.tolist()[0] == pytest.approx([0.0, -math.exp(0.1) / 2])
    assert metrics["ppo_clip_frac"] == pytest.approx(0.5)


def test_k3_kl_and_entropy_terms_add_to_the_loss_and_are_reported():
    # On-policy, A = 0, so only the extra terms remain. ref - logp = [log 2, 0]:
    # k3 = [2 - log 2 - 1, 0] -> mean (1 - log 2) / 2; entropy mean (0.5 + 1.5) / 2 = 1.
    # loss = 0.1 * (1 - log 2) / 2 - 0.01 * 1
    logprobs = _leaf([-1.0, -1.0])
    ref = torch.tensor([[-1.0 + math.log(2), -1.0]], dtype=torch.float64)
    entropy = torch.tensor([[0.5, 1.5]], dtype=torch.float64)
    loss, metrics = aipo_loss(logprobs, logprobs.detach(), torch.zeros(1, 2), torch.ones(1, 2),
                              rho=2.0, ref_logprobs=ref, kl_coef=0.1, entropy=entropy,
                              entropy_coef=0.01)
    assert metrics["kl"] == pytest.approx((1 - math.log(2)) / 2)
    assert metrics["entropy"] == pytest.approx(1.0)
    assert loss.item() == pytest.approx(0.1 * (1 - math.log(2)) / 2 - 0.01)


def test_staleness_metrics_report_mean_and_max_versions_behind():
    logprobs = torch.zeros(3, 2, requires_grad=True)
    _, metrics = aipo_loss(logprobs, torch.zeros(3, 2), torch.zeros(3, 2), torch.ones(3, 2),
                           rho=2.0, staleness=torch.tensor([0, 1, 2]))
    assert metrics["staleness_mean"] == pytest.approx(1.0)
    assert metrics["staleness_max"] == pytest.approx(2.0)


def test_all_masked_batch_gives_zero_loss_not_nan():
    logprobs = torch.zeros(2, 3, requires_grad=True)
    loss, metrics = aipo_loss(logprobs, torch.zeros(2, 3), torch.ones(2, 3), torch.zeros(2, 3),
                              rho=2.0, aggregation="sequence_mean")
    loss.backward()
    assert loss.item() == 0.0 and not torch.isnan(logprobs.grad).any()
    assert metrics["tokens"] == 0.0


def test_mismatched_shapes_name_the_offending_argument():
    with pytest.raises(ValueError, match="advantages"):
        aipo_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2), torch.ones(2, 3), 2.0)
    with pytest.raises(ValueError, match="kind"):
        aipo_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3),
                  2.0, kind="sac")


def test_clip_higher_lets_a_positive_advantage_push_the_ratio_further_up():
    # DAPO clip-higher, eps_low 0.2, eps_high 0.28. A = +1 on both tokens, r = e^0.2 = 1.2214 and
    # r = e^0.3 = 1.3499. Symmetric 0.2: both above 1.2, both clipped: gradient 0.
    # eps_high 0.28: 1.2214 < 1.28 is inside -> d/dlogpi = -r*A/2 = -e^0.2/2; 1.3499 > 1.28 clipped.
    behavior = torch.tensor([[-1.2, -1.3]], dtype=torch.float64)
    grads, clip = [], []
    for high in (None, 0.28):
        logprobs = _leaf([-1.0, -1.0])
        loss, metrics = aipo_loss(logprobs, behavior, torch.ones(1, 2), torch.ones(1, 2), rho=2.0,
                                  kind="ppo", clip_eps=0.2, clip_eps_high=high)
        loss.backward()
        grads.append(logprobs.grad.tolist()[0])
        clip.append(metrics["ppo_clip_frac"])
    assert grads[0] == pytest.approx([0.0, 0.0])
    assert grads[1] == pytest.approx([-math.exp(0.2) / 2, 0.0])
    assert clip == [1.0, 0.5]


def test_clip_low_bounds_a_negative_advantage_from_below():
    # A = -1, r = e^-0.25 = 0.7788 < 1 - 0.2 = 0.8: clipped (gradient 0) at eps_low 0.2, not at 0.3:
    # d/dlogpi = -r*A = +e^-0.25. eps_high does not matter on this side.
    behavior = torch.tensor([[-0.75]], dtype=torch.float64)
    for low, want in ((0.2, 0.0), (0.3, math.exp(-0.25))):
        logprobs = _leaf([-1.0])
        loss, _ = aipo_loss(logprobs, behavior, -torch.ones(1, 1), torch.ones(1, 1), rho=2.0, kind="ppo",
                            clip_eps=low, clip_eps_high=0.5)
        loss.backward()
        assert logprobs.grad.item() == pytest.approx(want)


def test_with_pi_old_equal_to_pi_every_kind_has_its_one_update_gradient():
    # First update of several: pi_old = pi, so r = pi/pi_old = 1 and aipo/pg/clamp must give the
    # gradient they give with one update per batch (the decoupled form only re-anchors the ratio).
    torch.manual_seed(0)
    base = torch.randn(3, 5, dtype=torch.float64) - 1.0
    behavior = base + 0.3 * torch.randn(3, 5, dtype=torch.float64)  # off-policy: pi/mu != 1
    advantages = torch.randn(3, 1, dtype=torch.float64).expand(3, 5)
    for kind in ("aipo", "pg", "clamp"):
        grads = []
        for old in (None, base.clone()):
            logprobs = base.clone().requires_grad_(True)
            loss, _ = aipo_loss(logprobs, behavior, advantages, torch.ones(3, 5), rho=1.1, kind=kind,
                                old_logprobs=old)
            loss.backward()
            grads.append(logprobs.grad)
        torch.testing.assert_close(grads[1], grads[0], msg=kind)


def test_decoupled_ppo_clips_the_update_ratio_and_weights_by_the_truncated_behaviour_ratio():
    # log pi = [-1, -1], log pi_old = [-1.5, -1.05], log mu = [-2, -0.5], A = +1, rho = 1.5, eps 0.2.
    # w = min(pi_old/mu, rho) = [min(e^0.5, 1.5), e^-0.55] = [1.5, 0.5769]
    # r = pi/pi_old = [e^0.5 = 1.6487 (> 1.2: clipped, gradient 0), e^0.05 = 1.0513 (inside)]
    # loss = -(1/2) sum w * min(r A, clip(r) A); d/dlogpi_1 = -w_1 * r_1 / 2
    logprobs = _leaf([-1.0, -1.0])
    old = torch.tensor([[-1.5, -1.05]], dtype=torch.float64)
    behavior = torch.tensor([[-2.0, -0.5]], dtype=torch.float64)
    loss, metrics = aipo_loss(logprobs, behavior, torch.ones(1, 2), torch.ones(1, 2), rho=1.5, kind="ppo",
                              clip_eps=0.2, old_logprobs=old)
    loss.backward()
    assert loss.item() == pytest.approx(-(1.5 * 1.2 + math.exp(-0.55) * math.exp(0.05)) / 2)
    assert logprobs.grad.tolist()[0] == pytest.approx([0.0, -math.exp(-0.55) * math.exp(0.05) / 2])
    assert metrics["ppo_clip_frac"] == 0.5  # counted on pi/pi_old
    assert metrics["is_ratio_mean"] == pytest.approx((math.exp(1.0) + math.exp(-0.5)) / 2)  # still pi/mu


def test_decoupled_aipo_is_the_truncated_weight_times_the_update_ratio():
    # log pi = -1, log pi_old = -1.2, log mu = -1.5, A = 2, rho = 1.2:
    # w = min(e^0.3 = 1.35, 1.2) = 1.2, r = e^0.2; loss = -w r A, d/dlogpi = -w r A = -2.4 e^0.2
    logprobs = _leaf([-1.0])
    loss, _ = aipo_loss(logprobs, torch.tensor([[-1.5]], dtype=torch.float64), torch.full((1, 1), 2.0),
                        torch.ones(1, 1), rho=1.2, old_logprobs=torch.tensor([[-1.2]], dtype=torch.float64))
    loss.backward()
    assert loss.item() == pytest.approx(-2.4 * math.exp(0.2))
    assert logprobs.grad.item() == pytest.approx(-2.4 * math.exp(0.2))
