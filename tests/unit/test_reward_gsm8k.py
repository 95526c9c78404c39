"""GSM8K/arith verifier: extraction rules, numeric comparison, and hostile inputs."""
import pytest

from llamarl_core.rewards import get_reward, reward_names
from llamarl_core.rewards.numeric import extract_final_number

gsm8k = get_reward("gsm8k")


@pytest.mark.parametrize("completion, reference", [
    ("so 3+4=7\n#### 7", "7"),
    ("#### $1,234.00 dollars", "1234"),
    ("the total is 18%.\n#### 18%", "18"),
    ("#### -3", "-3"),
    ("#### \u22123", "-3"),  # unicode minus
    ("no marker, but the last number is 42 apples", "42"),
    ("#### 0.50", "0.5"),
    ("#### 5", "#### 5"),  # a reference given as a whole solution line
])
def test_matching_final_answers_score_one(completion, reference):
    assert gsm8k(completion, reference) == 1.0


@pytest.mark.parametrize("completion, reference", [
    ("#### 8\nthen I changed my mind: 7", "7"),  # the #### answer wins over later numbers
    ("####", "7"),  # a marker with no number commits to nothing
    ("", "7"),
    ("#### 1,2,3", "123"),  # not thousands grouping: the first number is 1
    ("#### 7.5", "7"),
])
def test_wrong_or_missing_answers_score_zero(completion, reference):
    assert gsm8k(completion, reference) == 0.0


def test_the_final_number_is_read_after_the_last_marker():
    assert extract_final_number("#### 1\n#### 2 is it") == "2"
    assert extract_final_number("16-3-4=9") == "9"


HOSTILE = {
    "megabytes_of_digits": "9" * 3_000_000,
    "nested_braces": "\\boxed{" + "{" * 10_000 + "1" + "}" * 10_000 + "}",
    "unclosed_box": "the answer is \\boxed{12",
    "nul_bytes": "#### 1\x002\x00" * 1000,
    "huge_exponent": "#### 1e999999",
    "marker_flood": "####" * 500_000,
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_completions_return_a_float(name):
    result = gsm8k(HOSTILE[name], "5")
    assert isinstance(result, float) and result in (0.0, 1.0)


def test_huge_exponent_is_read_as_its_leading_number_not_evaluated():
    assert gsm8k("#### 1e999999", "1") == 1.0


def test_arith_aliases_the_gsm8k_rule_and_unknown_names_list_the_known_ones():
    assert get_reward("arith")("23+45=68\n#### 68", "68") == 1.0
    assert {"gsm8k", "arith", "math"} <= set(reward_names())
    with pytest.raises(KeyError, match="known rewards"):
        get_reward("bleu")


@pytest.mark.parametrize("completion, reference, score", [
    ("72 dollars a day for 3 days: \\boxed{216}", "216", 1.0),
    ("The answer is $\\boxed{1,234}$ apples for 3 kids.", "1234", 1.0),   # box, then later numbers
    ("#### 5\nno wait, \\boxed{6}", "6", 1.0),      # the later of #### and the box decides
    ("\\boxed{6} or rather\n#### 5", "5", 1.0),
    ("\\boxed{6} or rather\n#### 5", "6", 0.0),
    ("#### 5 then \\boxed{6", "5", 1.0),            # an unclosed box does not count
    ("\\boxed{x} 4", "4", 0.0),                      # a box with no number commits to nothing
    ("\\fbox{-7}", "-7", 1.0),
])
def test_a_final_boxed_number_is_read_like_a_hashes_line(completion, reference, score):
    # Why: a configurable instruction may ask GSM8K for \boxed{}; before, the last number
    # anywhere won ("\boxed{1,234} apples for 3 kids" read as 3).
    assert gsm8k(completion, reference) == score
