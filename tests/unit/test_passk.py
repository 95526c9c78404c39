"""pass@k, maj@k and the summary, against values worked out by hand."""
import math

import pytest

from llamarl_core.eval import maj_at_k, pass_at_k, summarize


@pytest.mark.parametrize("n, c, k, expected", [
    (4, 2, 1, 2 / 4),                    # pass@1 = c / n
    (4, 2, 2, 1 - 1 / 6),                # 1 - C(2,2)/C(4,2) = 1 - 1/6
    (4, 2, 3, 1.0),                      # only 2 wrong samples: any 3 include a right one
    (4, 1, 2, 1 - 3 / 6),                # 1 - C(3,2)/C(4,2) = 1 - 3/6
    (4, 1, 3, 1 - 1 / 4),                # 1 - C(3,3)/C(4,3) = 1 - 1/4
    (10, 3, 5, 1 - 21 / 252),            # 1 - C(7,5)/C(10,5) = 1 - 21/252
    (5, 0, 3, 0.0),                      # nothing right: never passes
    (5, 5, 1, 1.0),
])
def test_pass_at_k_matches_the_binomial_formula_worked_by_hand(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_agrees_with_exact_binomials_for_every_k_up_to_n():
    n = 20
    for c in range(n + 1):
        for k in range(1, n + 1):
            exact = 1 - math.comb(n - c, k) / math.comb(n, k)
            assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)


def test_pass_at_k_rejects_impossible_counts():
    with pytest.raises(ValueError, match="c <= n"):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(3, 1, 4)


def test_maj_at_k_votes_over_the_first_k_samples_and_ties_go_to_the_first_answer():
    answers, rewards = ["15", "14", "14", "15"], [1.0, 0.0, 0.0, 1.0]
    assert maj_at_k(answers, rewards, 1) == 1.0  # {15}
    assert maj_at_k(answers, rewards, 2) == 1.0  # 15:1, 14:1 -> tie, 15 seen first
    assert maj_at_k(answers, rewards, 3) == 0.0  # 14:2 beats 15:1
    assert maj_at_k(answers, rewards, 4) == 1.0  # 2-2 tie, 15 seen first


def test_samples_without_an_answer_do_not_vote():
    assert maj_at_k([None, None, "12"], [0.0, 0.0, 1.0], 3) == 1.0  # the only vote is 12
    assert maj_at_k([None, None], [0.0, 0.0], 2) == 0.0


def test_summary_averages_per_example_metrics():
    # Example A: greedy right, samples 2 of 4 right; B: greedy wrong, 1 of 4 right.
    preds = [
        {"greedy_reward": 1.0, "rewards": [1.0, 0.0, 0.0, 1.0], "answers": ["15", "14", "14", "15"],
         "finish_reasons": ["stop"] * 4, "num_tokens": [3, 3, 3, 3]},
        {"greedy_reward": 0.0, "rewards": [0.0, 0.0, 1.0, 0.0], "answers": ["13", "13", "12", None],
         "finish_reasons": ["stop", "stop", "stop", "length"], "num_tokens": [3, 3, 3, 7]},
    ]
    s = summarize(preds)
    assert s["n_examples"] == 2 and s["n_samples"] == 4
    assert s["accuracy"] == 0.5
    assert s["pass@1"] == pytest.approx((2 / 4 + 1 / 4) / 2)             # 0.375
    assert s["pass@k"][1] == pytest.approx(s["pass@1"])
    assert s["pass@k"][2] == pytest.approx(((1 - 1 / 6) + (1 - 3 / 6)) / 2)  # 2/3
    assert s["pass@k"][3] == pytest.approx((1.0 + (1 - 1 / 4)) / 2)         # 0.875
    assert s["pass@k"][4] == 1.0
    assert s["maj@k"] == {1: 0.5, 2: 0.5, 3: 0.0, 4: 0.5}  # A: 1,1,0,1; B: 0,0,0,0
    assert s["truncated_fraction"] == pytest.approx(1 / 8)
    assert s["mean_completion_tokens"] == pytest.approx(28 / 8)


def test_a_partial_reward_does_not_count_as_solved():
    s = summarize([{"greedy_reward": 0.5, "rewards": [0.5], "answers": ["1"],
                    "finish_reasons": ["stop"], "num_tokens": [1]}])
    assert s["accuracy"] == 0.0 and s["pass@1"] == 0.0 and s["mean_reward"] == 0.5
