"""The built-in arithmetic task and the prompt/target templates."""
import pytest

from llamarl_core.config.schema import DataConfig
from llamarl_core.data import Example, arith_examples, prompt_format, render_prompt, render_target, resolve_dataset
from llamarl_core.rewards import get_reward


def test_default_arith_is_two_digit_addition_with_a_short_solution():
    (example,) = arith_examples("train", 1, seed=0)
    a, b = example.prompt.split("+")
    assert len(a) == len(b) == 2
    assert example.reference == str(int(a) + int(b))
    assert example.solution.endswith(f"\n#### {example.reference}")


def test_arith_is_deterministic_by_seed_and_train_test_are_disjoint():
    train = arith_examples("train", 2000, seed=3)
    test = arith_examples("test", 200, seed=3)
    assert train == arith_examples("train", 2000, seed=3)
    assert train != arith_examples("train", 2000, seed=4)
    assert not {ex.prompt for ex in train} & {ex.prompt for ex in test}


def test_arith_knobs_follow_usual_operator_precedence():
    # 3 operands of 1 digit with all operators; the reference is computed * before +/-.
    for ex in arith_examples("train", 50, seed=0, digits=1, num_operands=3, ops="+-*"):
        a, op1, b, op2, c = ex.prompt
        x, y, z = int(a), int(b), int(c)
        if op2 == "*":
            rest = y * z
            expected = x + rest if op1 == "+" else x - rest if op1 == "-" else x * rest
        else:
            left = x + y if op1 == "+" else x - y if op1 == "-" else x * y
            expected = left + z if op2 == "+" else left - z
        assert ex.reference == str(expected)


def test_bad_arith_knobs_name_the_knob():
    with pytest.raises(ValueError, match="ops"):
        arith_examples("train", 1, seed=0, ops="/")
    with pytest.raises(ValueError, match="split"):
        arith_examples("validation", 1, seed=0)


def test_plain_prompt_and_target_are_short_and_score_full_reward():
    (example,) = resolve_dataset("arith", None, "test", num_examples=1, seed=0)
    prompt, target = render_prompt(example), render_target(example)
    assert prompt == f"Q: {example.prompt}\nA:"
    assert get_reward("arith")(target, example.reference) == 1.0


def test_chat_template_goes_through_the_tokenizer():
    class FakeTokenizer:
        def apply_chat_template(self, messages):
            return "<user>" + messages[0]["content"] + "</user><assistant>"

    example = Example("1", "What is 2+2?", "4", "2+2=4\n#### 4", "gsm8k")
    rendered = render_prompt(example, prompt_format(DataConfig(name="gsm8k", template="chat")), FakeTokenizer())
    assert rendered.startswith("<user>What is 2+2?\n") and "####" in rendered
    assert render_prompt(example) == "Question: What is 2+2?\nAnswer:"
    with pytest.raises(ValueError, match="tokenizer"):
        render_prompt(example, "chat")


def test_target_without_a_solution_uses_the_verifier_format():
    assert render_target(Example("1", "p", "\\frac12", None, "math")) == " \\boxed{\\frac12}"
    assert render_target(Example("2", "p", "7", None, "gsm8k")) == " #### 7"
    assert render_target(Example("3", "p", "7")) == " 7"  # generic: the answer field as written


def test_column_solutions_work_each_digit_with_its_carry():
    from llamarl_core.data.arith import column_steps
    # 27 + 48: units 7+8 = 15 (write 5, carry 1), tens 2+4+1 = 7 → 75.
    assert column_steps([27, 48]) == ["7+8=15 -> 5", "2+4+1=7 -> 75"]
    # 67 + 58: 7+8 = 15 → 5, 6+5+1 = 12 → 125 (the last column's total leads).
    assert column_steps([67, 58]) == ["7+8=15 -> 5", "6+5+1=12 -> 125"]
    # 89 + 20: no carry; 9+0 = 9 → 9, 8+2 = 10 → 109.
    assert column_steps([89, 20]) == ["9+0=9 -> 9", "8+2=10 -> 109"]
    ex = arith_examples("train", 50, seed=3)
    for e in ex:
        a, b = map(int, e.prompt.split("+"))
        assert e.reference == str(a + b) and e.solution.endswith(f"#### {a + b}")


def test_short_solution_style_is_still_available():
    (e,) = arith_examples("train", 1, seed=0, solution_style="short")
    assert e.solution == f"{e.prompt}={e.reference}\n#### {e.reference}"


def test_digit_sums_style_keeps_the_column_facts_and_ends_in_the_verifier_format():
    from llamarl_core.data.arith import _solution
    from llamarl_core.rewards.numeric import gsm8k_reward
    # 93 + 19: 3+9 = 12 (carry 1), 9+1+1 = 11 → 112; the running answer (" -> 2") is dropped.
    assert _solution("93+19", [93, 19], ["+"], "112", "digit_sums") == "3+9=12\n9+1+1=11\n#### 112"
    columns = arith_examples("train", 30, seed=0)
    sums = arith_examples("train", 30, seed=0, solution_style="digit_sums")
    for c, s in zip(columns, sums):
        assert (s.prompt, s.reference) == (c.prompt, c.reference)          # same problems
        assert s.solution == "\n".join(line.split(" -> ")[0] for line in c.solution.splitlines())
        assert gsm8k_reward(" " + s.solution, s.reference) == 1.0
