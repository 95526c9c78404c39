"""#44 case 4: a reward that is not a finite number within reward.max_abs is an error for its
sample (scored 0, counted in reward/errors, the first one kept for the log), checked in the
worker where the value is produced. Today ±1e308 passed and overflowed the group's advantage
to NaN, and the string "1e308" counted as solved."""
import math

import numpy as np
import pytest
import torch

from llamarl_core.rewards import RewardPool
from llamarl_core.rewards.values import checked_reward

WHY = "a reward must be a finite number with |r| <= reward.max_abs=1e+06"


@pytest.mark.parametrize("value", ["1e308", "0.5", b"1", 1e308, -1e308, float("inf"), -math.inf,
                                   float("nan"), 1e6 + 1, None, [1.0], torch.tensor([1.0, 2.0])])
def test_a_reward_that_is_not_a_finite_number_within_max_abs_is_refused(value):
    score, error = checked_reward(value, 1e6)
    assert score == 0.0 and error.endswith(WHY) and error.startswith("returned ")
    assert f"(a {type(value).__name__})" in error


@pytest.mark.parametrize("value, expected", [
    (0.5, 0.5), (-3, -3.0), (1e6, 1e6), (-1e6, -1e6), (np.float32(0.25), 0.25), (np.int64(2), 2.0),
    (torch.tensor(0.75), 0.75), (True, 1.0), (False, 0.0)])
def test_a_real_number_within_max_abs_is_accepted_bools_as_one_and_zero(value, expected):
    assert checked_reward(value, 1e6) == (expected, None)


def test_max_abs_is_the_bound_it_names():
    assert checked_reward(5.0, 4.0) == (0.0, "returned 5.0 (a float): a reward must be a finite "
                                             "number with |r| <= reward.max_abs=4")
    assert checked_reward(4.0, 4.0) == (4.0, None)


REWARD_FILE = """
import numpy as np
VALUES = {"str": "1e308", "huge": 1e308, "neg_inf": float("-inf"), "nan": float("nan"),
          "np": np.float64(0.5), "bool": True, "ok": 0.25}

def score(completion, example):
    return VALUES[completion]

def lists(completions, examples):
    return [VALUES[c] for c in completions]
lists.batch = True
"""


def test_the_pool_scores_bad_values_zero_and_counts_each_as_an_error(reward_file):
    completions = ["ok", "str", "huge", "np", "neg_inf", "nan", "bool"]
    # one worker: the items answer in order, so the first error logged is sample 1's
    with RewardPool(f"{reward_file}:score", num_workers=1, timeout_s=5.0) as pool:
        scores = pool.score(completions, [{}] * len(completions))
        assert scores == [0.25, 0.0, 0.0, 0.5, 0.0, 0.0, 1.0]
        assert pool.stats["errors"] == 4 and pool.stats["timeouts"] == 0
        assert pool.first_error == f"reward {reward_file}:score, sample 1: returned '1e308' (a str): {WHY}"


def test_a_batch_reward_loses_only_its_bad_items(reward_file):
    completions = ["huge", "ok", "str", "np"]
    with RewardPool(f"{reward_file}:lists", num_workers=1, timeout_s=5.0) as pool:
        assert pool.score(completions, [{}] * 4) == [0.0, 0.25, 0.0, 0.5]
        assert pool.stats["errors"] == 2
        assert pool.first_error == f"reward {reward_file}:lists, sample 0: returned 1e+308 (a float): {WHY}"


def test_max_abs_reaches_the_worker(reward_file):
    with RewardPool(f"{reward_file}:score", num_workers=1, timeout_s=5.0, max_abs=0.3) as pool:
        assert pool.score(["ok", "np"], [{}] * 2) == [0.25, 0.0]  # 0.5 > 0.3
        assert pool.stats["errors"] == 1 and "reward.max_abs=0.3" in pool.first_error
