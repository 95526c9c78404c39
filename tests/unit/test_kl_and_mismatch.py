"""algorithm.kl_estimator, kl_in and mismatch (tis | mis): the pure functions on hand-made
numbers, the identity ppo + tis = AIPO(rho = C), and the config's refusals (exit 2)."""
import math

import pytest
import torch

from llamarl_cli.main import main
from llamarl_core.algorithms.aipo import aipo_loss
from llamarl_core.algorithms.kl import kl_estimate, kl_reward_penalty
from llamarl_core.algorithms.mismatch import mismatch_weight

LOG2 = math.log(2.0)


@pytest.mark.parametrize("estimator, value, grad", [
    # x = log pi - log ref = log 0.5 - log 0.25 = log 2
    ("k1", LOG2, 1.0),                       # x; d/dx = 1
    ("k2", LOG2 ** 2 / 2, LOG2),             # x^2/2 = 0.2402; d/dx = x
    ("k3", 0.5 + LOG2 - 1.0, 0.5),           # exp(-x) + x - 1 = 0.1931; d/dx = 1 - exp(-x) = 0.5
])
def test_each_kl_estimator_matches_its_formula_and_gradient_worked_by_hand(estimator, value, grad):
    logprobs = torch.tensor([[math.log(0.5)]], dtype=torch.float64, requires_grad=True)
    kl = kl_estimate(logprobs, torch.tensor([[math.log(0.25)]], dtype=torch.float64), estimator)
    kl.sum().backward()
    assert kl.item() == pytest.approx(value, abs=1e-12)
    assert logprobs.grad.item() == pytest.approx(grad, abs=1e-12)


def test_the_kl_reward_penalty_is_kl_coef_times_the_sum_over_counted_tokens():
    logprobs = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, 0.0]])
    ref = torch.tensor([[-1.5, -1.0, 0.0], [-1.0, -1.0, -9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])  # the third token is padding: its x = 3 or 9 is not counted
    penalty, sums = kl_reward_penalty(logprobs, ref, mask, "k1", 0.1)
    # k1 = x: row 0 0.5 - 1.0 = -0.5, row 1 0.5 + 0.5 = 1.0; times 0.1
    assert torch.allclose(penalty, torch.tensor([-0.05, 0.1]))
    assert torch.allclose(sums, torch.tensor([0.5, 4.0]))  # masked KL sum, tokens


def test_tis_truncates_each_tokens_ratio_at_the_cap():
    old = torch.zeros(1, 3)
    behavior = torch.tensor([[-math.log(3.0), math.log(2.0), 5.0]])  # pi_old/mu = 3, 0.5, (padding)
    weight, m = mismatch_weight(old, behavior, torch.tensor([[1, 1, 0]]), "tis", 2.0)
    assert torch.allclose(weight[0, :2], torch.tensor([2.0, 0.5]))  # min(3, 2), min(0.5, 2)
    assert m == {"mismatch_weight_mean": 1.25, "mismatch_masked_frac": 0.0}


def test_mis_keeps_a_sequence_at_its_ratio_and_masks_one_above_the_cap():
    old = torch.zeros(2, 3)
    # log mu = -log(ratio): row 0's ratios 1.5 x 1.2 = 1.8 <= 2 (kept, every token weighs 1.8);
    # row 1's 2 x 1.5 = 3 > 2 (masked). The padding token (ratio e^9) is not in either product.
    behavior = -torch.tensor([[math.log(1.5), math.log(1.2), 9.0], [LOG2, math.log(1.5), 9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    weight, m = mismatch_weight(old, behavior, mask, "mis", 2.0)
    assert torch.allclose(weight[:, :2], torch.tensor([[1.8, 1.8], [0.0, 0.0]]))
    assert m["mismatch_masked_frac"] == 0.5  # 2 of 4 counted tokens
    assert m["mismatch_weight_mean"] == pytest.approx(0.9)  # (1.8 + 1.8 + 0 + 0) / 4


def _grad(kind, **kw):
    g = torch.Generator().manual_seed(0)
    logprobs = (-torch.rand(3, 5, generator=g, dtype=torch.float64)).requires_grad_()
    behavior = logprobs.detach() + torch.randn(3, 5, generator=g, dtype=torch.float64)  # ratios far from 1
    adv = torch.randn(3, 1, generator=g, dtype=torch.float64).expand(3, 5)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    loss, metrics = aipo_loss(logprobs, behavior, adv, mask, kw.pop("rho", 4.0), kind=kind, **kw)
    loss.backward()
    return logprobs.grad, metrics, (logprobs, behavior, adv, mask)


# gspo at one update: its sequence ratio to pi_old is 1 (inside any clip range) and the
# GSPO-token gradient of sg[s] * pi_t / sg[pi_t] is grad log pi_t; dual-clip's bound c*A (c > 1)
# is below A = J at ratio 1: both reduce to -w * A * grad log pi, AIPO's gradient with rho = C
@pytest.mark.parametrize("kind,extra", [("ppo", {}), ("pg", {}), ("gspo", {}),
                                        ("ppo", {"dual_clip_c": 3.0}), ("gspo", {"dual_clip_c": 3.0})])
def test_ppo_pg_or_gspo_with_tis_at_one_update_has_exactly_aipos_gradient_with_rho_equal_to_the_cap(kind, extra):
    tis, metrics, _ = _grad(kind, mismatch="tis", mismatch_cap=2.0, **extra)
    aipo, _, _ = _grad("aipo", rho=2.0)
    assert torch.allclose(tis, aipo, atol=1e-12)
    assert 0.0 < metrics["mismatch_weight_mean"] and metrics["mismatch_masked_frac"] == 0.0


def test_aipo_with_mis_weighs_each_token_by_its_sequences_mis_weight():
    grad, _, (logprobs, behavior, adv, mask) = _grad("aipo", mismatch="mis", mismatch_cap=2.0)
    weight, _ = mismatch_weight(logprobs.detach(), behavior, mask, "mis", 2.0)
    # -w * (pi/pi_old) * A at pi = pi_old: gradient -w * A * grad log pi, over the 9 counted tokens
    assert torch.allclose(grad, -weight * adv * mask / 9, atol=1e-12)
    assert (weight[:, 0] == 0).any() and (weight[:, 0] > 0).any()  # these inputs mask one sequence, keep one


def _plan(capsys, *words):
    code = main(["plan", *words])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("words", [
    ["algorithm.kl_coef=0.05", "algorithm.kl_estimator=k1"],
    ["algorithm.kl_coef=0.05", "algorithm.kl_estimator=k2", "algorithm.kl_in=reward"],
    ["algorithm.name=ppo", "algorithm.mismatch=tis", "algorithm.mismatch_cap=3"],
    ["algorithm.name=aipo", "algorithm.mismatch=mis"],
])
def test_the_plan_accepts_each_kl_and_mismatch_option(capsys, words):
    code, err = _plan(capsys, *words)
    assert code == 0, err


@pytest.mark.parametrize("words, first, second", [
    (["algorithm.kl_estimator=k1"], "algorithm.kl_estimator=k1", "algorithm.kl_coef=0"),
    (["algorithm.kl_in=reward"], "algorithm.kl_in=reward", "algorithm.kl_coef=0"),
    (["algorithm.mismatch_cap=3"], "algorithm.mismatch_cap=3.0", "algorithm.mismatch=none"),
    (["algorithm.name=aipo", "algorithm.mismatch=tis"], "algorithm.mismatch=tis", "algorithm.name=aipo"),
    (["algorithm.name=clamp", "algorithm.mismatch=mis"], "algorithm.mismatch=mis", "algorithm.name=clamp"),
    (["algorithm.mismatch=mis", "algorithm.rho=2"], "algorithm.rho=2.0", "algorithm.mismatch=mis"),
])
def test_the_plan_exits_2_naming_both_keys_of_each_refused_combination(capsys, words, first, second):
    code, err = _plan(capsys, *words)
    assert code == 2 and first in err and second in err, err
    assert len(err.strip().splitlines()) == 1, err
