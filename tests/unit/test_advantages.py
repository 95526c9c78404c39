"""Group-relative advantages: hand-computed values for each mode, and no NaN ever."""
import pytest
import torch

from llamarl_core.algorithms import compute_advantages

# Two prompts, group size 3: rewards [1, 0, 0] and [1, 1, 1].
REWARDS = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0])


def test_mean_mode_subtracts_the_group_mean():
    # group 0 mean 1/3 -> [2/3, -1/3, -1/3]; group 1 all equal -> 0
    expected = [2 / 3, -1 / 3, -1 / 3, 0.0, 0.0, 0.0]
    assert compute_advantages(REWARDS, 3, "mean").tolist() == pytest.approx(expected)


def test_leave_one_out_subtracts_the_mean_of_the_others():
    # sample 0: 1 - mean(0, 0) = 1; sample 1: 0 - mean(1, 0) = -0.5
    expected = [1.0, -0.5, -0.5, 0.0, 0.0, 0.0]
    assert compute_advantages(REWARDS, 3, "loo").tolist() == pytest.approx(expected)


def test_std_mode_divides_by_the_group_population_std():
    # group 0: population std of [1, 0, 0] = sqrt(2/9) = 0.4714; (2/3) / 0.4714 = 1.4142
    out = compute_advantages(REWARDS, 3, "std").tolist()
    assert out[:3] == pytest.approx([2**0.5, -(2**0.5) / 2, -(2**0.5) / 2], rel=1e-5)
    assert out[3:] == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("mode", ["mean", "loo", "std"])
def test_a_group_with_equal_rewards_gives_exact_zeros_in_every_mode(mode):
    rewards = torch.full((4,), 0.1)  # 0.1 is not exact in binary: rounding must not leak
    out = compute_advantages(rewards, 4, mode)
    assert out.tolist() == [0.0] * 4 and not torch.isnan(out).any()


def test_rewards_not_a_multiple_of_the_group_size_are_rejected():
    with pytest.raises(ValueError, match="group_size"):
        compute_advantages(torch.zeros(5), 2)
