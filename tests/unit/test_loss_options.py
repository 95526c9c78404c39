"""GSPO, dual-clip PPO and Dr.GRPO's constant length normaliser: losses and gradients worked out by
hand, GSPO against TRL's sequence-level formula, the constant norm exact across micro-batches, and
the config's refusals (exit 2 from `llamarl plan`)."""
import math

import pytest
import torch

from llamarl_cli.main import main
from llamarl_core.algorithms import aipo_loss
from test_train_step import _whole

S1, S2 = math.exp(0.1), math.exp(0.5)  # the two sequences' GSPO ratios below


def _flat(t: torch.Tensor) -> list[float]:
    return t.reshape(-1).tolist()


def _gspo_inputs():
    # sequence 1: 3 tokens, log pi - log mu = 0.1 each -> s1 = e^0.1 = 1.10517, A = +1
    # sequence 2: 2 tokens (third padded), log-ratios 0.2 and 0.8 -> mean 0.5, s2 = e^0.5 = 1.64872, A = -1
    logprobs = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, -1.0, -3.0]], dtype=torch.float64, requires_grad=True)
    behavior = torch.tensor([[-1.1, -2.1, -0.6], [-1.2, -1.8, -9.0]], dtype=torch.float64)
    advantages = torch.tensor([[1.0] * 3, [-1.0] * 3], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    return logprobs, behavior, advantages, mask


def test_gspo_clips_the_geometric_mean_ratio_of_each_sequence():
    # eps 0.2: s1 in [0.8, 1.2] -> J1 = s1 * 1; s2 > 1.2 but A < 0, so min(-s2, -1.2) = -s2 (unclipped).
    # sequence_mean: loss = -(J1 + J2)/2 = (s2 - s1)/2 = 0.27178.
    # GSPO-token gradient s_i * A_i * grad log pi_t, averaged over the sequence then the 2 sequences:
    # seq 1: -(1/2)(1/3) s1 = -s1/6 per token; seq 2: -(1/2)(1/2)(-s2) = +s2/4; the padded token 0.
    logprobs, behavior, advantages, mask = _gspo_inputs()
    loss, metrics = aipo_loss(logprobs, behavior, advantages, mask, rho=4.0, aggregation="sequence_mean",
                              kind="gspo", clip_eps=0.2)
    loss.backward()
    assert loss.item() == pytest.approx((S2 - S1) / 2)
    assert _flat(logprobs.grad) == pytest.approx([-S1 / 6] * 3 + [S2 / 4, S2 / 4, 0.0])
    assert metrics["ppo_clip_frac"] == pytest.approx(2 / 5)  # seq 2's tokens: its ratio is outside the range


def test_gspo_with_a_positive_advantage_above_the_range_gets_no_gradient():
    # sequence 2 with A = +1: min(s2, 1.2) = 1.2, a constant; loss = -(s1 + 1.2)/2, seq 2's gradient 0
    logprobs, behavior, advantages, mask = _gspo_inputs()
    loss, _ = aipo_loss(logprobs, behavior, advantages.abs(), mask, rho=4.0, aggregation="sequence_mean",
                        kind="gspo", clip_eps=0.2)
    loss.backward()
    assert loss.item() == pytest.approx(-(S1 + 1.2) / 2)
    assert _flat(logprobs.grad) == pytest.approx([-S1 / 6] * 3 + [0.0, 0.0, 0.0])


def _trl_sequence_level(logprobs, behavior, advantages, mask, lo, hi, loss_type):
    """TRL GRPOTrainer._compute_loss, importance_sampling_level="sequence": the [B, 1] ratio with its
    gradient through the mean log-ratio; loss_type grpo (per-sequence mean) or dapo (token mean)."""
    log_w = ((logprobs - behavior) * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)  # [B]
    coef = torch.exp(log_w)[:, None]  # [B, 1]
    a = advantages[:, :1]  # [B, 1]
    per_token = -torch.minimum(coef * a, coef.clamp(lo, hi) * a).expand_as(mask)  # [B, T]
    if loss_type == "grpo":
        return ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    return (per_token * mask).sum() / mask.sum()


@pytest.mark.parametrize("aggregation,loss_type", [("sequence_mean", "grpo"), ("token_mean", "dapo")])
def test_gspo_matches_trls_sequence_level_loss_and_gradient(aggregation, loss_type):
    torch.manual_seed(0)
    base = torch.randn(6, 7, dtype=torch.float64) - 1.0
    behavior = base + 0.3 * torch.randn(6, 7, dtype=torch.float64)
    advantages = torch.randn(6, 1, dtype=torch.float64).expand(6, 7)
    mask = (torch.rand(6, 7) > 0.3).double()
    mask[:, 0] = 1.0
    grads, losses = [], []
    for fn in ("ours", "trl"):
        logprobs = base.clone().requires_grad_(True)
        if fn == "ours":
            loss, _ = aipo_loss(logprobs, behavior, advantages, mask, rho=4.0, aggregation=aggregation,
                                kind="gspo", clip_eps=0.1, clip_eps_high=0.15)
        else:
            loss = _trl_sequence_level(logprobs, behavior, advantages, mask, 0.9, 1.15, loss_type)
        loss.backward()
        grads.append(logprobs.grad * mask)
        losses.append(loss.item())
    assert losses[0] == pytest.approx(losses[1])
    assert torch.allclose(grads[0], grads[1])


def test_gspo_over_several_updates_takes_the_ratio_to_pi_old_and_keeps_the_behaviour_weight():
    # log pi = [-1, -1], log pi_old = [-1.1, -1.3]: s = e^((0.1 + 0.3)/2) = e^0.2 = 1.2214, in [0.7, 1.3]
    # log mu = [-1.1, -1.3 - ln 2]: w = min(pi_old/mu, 4) = [1, 2]; A = +1
    # per token -w_t * s; sequence_mean: -(1 + 2) s / 2 = -1.5 s; gradient -(1/2) w_t s = [-s/2, -s]
    s = math.exp(0.2)
    logprobs = torch.tensor([[-1.0, -1.0]], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([[-1.1, -1.3]], dtype=torch.float64)
    behavior = torch.tensor([[-1.1, -1.3 - math.log(2)]], dtype=torch.float64)
    loss, _ = aipo_loss(logprobs, behavior, torch.ones(1, 2, dtype=torch.float64), torch.ones(1, 2), rho=4.0,
                        aggregation="sequence_mean", kind="gspo", clip_eps=0.3, old_logprobs=old)
    loss.backward()
    assert loss.item() == pytest.approx(-1.5 * s)
    assert logprobs.grad.tolist()[0] == pytest.approx([-s / 2, -s])


def test_dual_clip_bounds_a_negative_advantage_with_a_large_ratio():
    # 3 tokens, log pi = 0, eps 0.2, c = 3:
    #  r = 5, A = -2: min(-10, 1.2 * -2) = -10 < c*A = -6 -> -6, bound active, gradient 0
    #  r = 2, A = -1: min(-2, -1.2) = -2 > -3 -> -2, gradient of -r*A wrt log pi = r*|A| = 2
    #  r = 5, A = +1: min(5, 1.2) = 1.2 (A > 0: no dual clip), gradient 0
    # token_mean loss = (6 + 2 - 1.2)/3 = 6.8/3; gradient [0, 2/3, 0]; without c: (10 + 2 - 1.2)/3, [10/3, 2/3, 0]
    behavior = torch.tensor([[-math.log(5), -math.log(2), -math.log(5)]], dtype=torch.float64)
    advantages = torch.tensor([[-2.0, -1.0, 1.0]], dtype=torch.float64)
    for c, want_loss, want_grad in ((3.0, 6.8 / 3, [0.0, 2 / 3, 0.0]), (None, 10.8 / 3, [10 / 3, 2 / 3, 0.0])):
        logprobs = torch.zeros(1, 3, dtype=torch.float64, requires_grad=True)
        loss, metrics = aipo_loss(logprobs, behavior, advantages, torch.ones(1, 3), rho=4.0, kind="ppo",
                                  clip_eps=0.2, dual_clip_c=c)
        loss.backward()
        assert loss.item() == pytest.approx(want_loss)
        assert logprobs.grad.tolist()[0] == pytest.approx(want_grad)
        assert metrics.get("dual_clip_frac") == (None if c is None else pytest.approx(1 / 3))


def test_dual_clip_applies_to_the_decoupled_ppo_update_ratio_and_to_gspo():
    # decoupled: r = pi/pi_old = 4, w = pi_old/mu = 0.5, A = -1, c = 3: max(min(-4, -1.2), -3) = -3,
    # loss = -w * -3 = 1.5, gradient 0
    logprobs = torch.zeros(1, 1, dtype=torch.float64, requires_grad=True)
    old = torch.full((1, 1), -math.log(4), dtype=torch.float64)
    loss, metrics = aipo_loss(logprobs, old + math.log(2), -torch.ones(1, 1, dtype=torch.float64), torch.ones(1, 1),
                              rho=4.0, kind="ppo", old_logprobs=old, dual_clip_c=3.0)
    loss.backward()
    assert loss.item() == pytest.approx(1.5) and logprobs.grad.item() == 0.0
    assert metrics["dual_clip_frac"] == 1.0
    # gspo, the inputs above, c = 1.5 < s2: J2 = max(-s2, -1.5) = -1.5; loss = -(s1 - 1.5)/2, seq 2 gets no gradient
    logprobs, behavior, advantages, mask = _gspo_inputs()
    loss, metrics = aipo_loss(logprobs, behavior, advantages, mask, rho=4.0, aggregation="sequence_mean",
                              kind="gspo", clip_eps=0.2, dual_clip_c=1.5)
    loss.backward()
    assert loss.item() == pytest.approx((1.5 - S1) / 2)
    assert _flat(logprobs.grad) == pytest.approx([-S1 / 6] * 3 + [0.0, 0.0, 0.0])
    assert metrics["dual_clip_frac"] == pytest.approx(2 / 5)


def test_the_constant_length_norm_is_the_token_sum_over_rows_times_max_new_tokens():
    # pg, per token -A * log pi. Row 1: A = 1, log pi = [-1, -2, -0.5] -> 1 + 2 + 0.5 = 3.5.
    # Row 2: A = -1, log pi = [-1, -1] (third masked) -> -2. Row 3: no counted token (not a row of the
    # loss). max_new_tokens 4: (3.5 - 2) / (2 rows * 4) = 0.1875 (TRL dr_grpo: sum / (rows * max_len));
    # gradient -A / 8: row 1 -1/8, row 2 +1/8. token_mean would divide by the 5 tokens instead.
    logprobs = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, -1.0, -7.0], [-1.0, -1.0, -1.0]],
                            dtype=torch.float64, requires_grad=True)
    advantages = torch.tensor([[1.0] * 3, [-1.0] * 3, [5.0] * 3], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    loss, _ = aipo_loss(logprobs, logprobs.detach(), advantages, mask, rho=4.0, kind="pg", length_norm_tokens=4)
    loss.backward()
    assert loss.item() == pytest.approx(1.5 / 8)
    assert _flat(logprobs.grad) == pytest.approx([-1 / 8] * 3 + [1 / 8, 1 / 8, 0.0] + [0.0] * 3)


@pytest.mark.parametrize("name", ["pg", "gspo"])
def test_the_constant_length_norm_gives_one_gradient_for_any_micro_batch_size(name):
    # 8 rows of 1-12 completion tokens (test_train_step's batch): the step's gradient is the token sum
    # over (rows x max_new_tokens) however the rows are cut into micro-batches
    over = (f"algorithm.name={name}", "algorithm.length_norm=constant")
    whole, _ = _whole(8, over)
    for micro in (1, 3):
        cut, _ = _whole(micro, over)
        assert all(torch.allclose(a, b, atol=1e-6, rtol=1e-5) for a, b in zip(whole, cut))
    # and it is not the token-mean gradient: the normaliser changed
    tokens, _ = _whole(8, (f"algorithm.name={name}",))
    assert not all(torch.allclose(a, b, atol=1e-6, rtol=1e-5) for a, b in zip(whole, tokens))


@pytest.mark.parametrize("words", [
    ["algorithm.name=gspo", "algorithm.clip_eps_low=3e-4", "algorithm.clip_eps_high=4e-4",
     "algorithm.aggregation=sequence_mean"],
    ["algorithm.name=ppo", "algorithm.dual_clip_c=3.0"],
    ["algorithm.name=gspo", "algorithm.dual_clip_c=3.0"],
    ["algorithm.length_norm=constant"],
])
def test_the_plan_accepts_each_loss_option(capsys, words):
    assert main(["plan", *words]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("words,message", [
    (["algorithm.dual_clip_c=3.0"], "algorithm.dual_clip_c=3.0 needs algorithm.name in ('ppo', 'gspo'), "
                                    "got algorithm.name=aipo"),
    (["algorithm.name=ppo", "algorithm.dual_clip_c=1.0"], "algorithm.dual_clip_c=1.0 must be a finite number > 1"),
    (["algorithm.length_norm=constant", "algorithm.aggregation=sequence_mean"],
     "algorithm.length_norm=constant contradicts algorithm.aggregation=sequence_mean"),
    (["algorithm.length_norm=words"], "algorithm.length_norm"),
])
def test_the_plan_refuses_a_contradicting_loss_option_naming_both_keys(capsys, words, message):
    assert main(["plan", *words]) == 2
    assert message in capsys.readouterr().err
