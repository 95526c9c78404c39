"""MATH verifier and RewardPool: equivalence via math-verify in worker processes, hostile
inputs, timeouts and crashed workers scored 0.0 and counted, order preserved."""
import pytest

from llamarl_core.rewards import RewardPool, get_reward
from llamarl_core.rewards.boxed import last_boxed


@pytest.fixture(scope="module")
def pool():
    with RewardPool("math", num_workers=1, timeout_s=1.0) as p:
        yield p


def test_last_boxed_takes_the_last_complete_box():
    assert last_boxed("\\boxed{1} and \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert last_boxed("\\boxed{7} then \\boxed{12") == "7"  # unclosed final box skipped
    assert last_boxed("\\boxed 5$") == "5"
    assert last_boxed("no box") is None


def test_equivalent_answers_score_one_and_others_zero(pool):
    completions = ["so \\boxed{\\frac{1}{2}}", "\\boxed{0.5}", "\\boxed{\\dfrac{2}{4}}",
                   "\\boxed{3}", "answer 1/2 without a box"]
    assert pool.score(completions, ["\\frac12"] * 5) == [1.0, 1.0, 1.0, 0.0, 0.0]


HOSTILE = {
    "megabytes_of_digits": "9" * 3_000_000,
    "nested_braces": "\\boxed{" + "{" * 10_000 + "1" + "}" * 10_000 + "}",
    "unclosed_box": "\\boxed{" * 5000,
    "nul_bytes": "\\boxed{1\x002}",
    "huge_exponent": "\\boxed{1e999999}",
    "tower_of_powers": "\\boxed{10^{10^{10^{10}}}}",
}


def test_hostile_completions_each_return_a_float_and_the_pool_keeps_working(pool):
    names = sorted(HOSTILE)
    scores = pool.score([HOSTILE[n] for n in names], ["5"] * len(names))
    assert all(isinstance(s, float) for s in scores) and scores == [0.0] * len(names)
    # A sane item after the storm still gets its worker and its correct score.
    assert pool.score(["\\boxed{5}"], ["5"]) == [1.0]


def test_an_answer_that_exceeds_the_timeout_scores_zero_and_is_counted(pool):
    before = pool.stats["timeouts"] + pool.stats["worker_crashes"]
    assert pool.score(["\\boxed{10^{10^{10^{10}}}!}"], ["5"]) == [0.0]
    assert pool.stats["timeouts"] + pool.stats["worker_crashes"] == before + 1
    assert pool.score(["\\boxed{\\sqrt{4}}"], ["2"]) == [1.0]


def test_a_killed_worker_is_respawned_and_scoring_continues(pool):
    pool._workers[0].process.kill()
    pool._workers[0].process.wait()
    assert pool.score(["\\boxed{x+1}", "\\boxed{2}"], ["1+x", "3"]) == [1.0, 0.0]
    assert pool.stats["worker_crashes"] >= 1


def test_get_reward_math_scores_a_single_pair():
    assert get_reward("math")("thus $\\boxed{\\pi/2}$.", "\\frac{\\pi}{2}") == 1.0


def test_mismatched_list_lengths_are_rejected(pool):
    with pytest.raises(ValueError, match="references"):
        pool.score(["a"], [])
