"""The example tool and game users copy (recipes/envs/), called directly, and the page that shows them."""
import glob
import importlib.util
from pathlib import Path

import pytest

from llamarl_core.envs.protocol import check_messages, check_step

ROOT = Path(__file__).resolve().parents[2]


def load(name: str):
    """A recipes/envs file as the worker loads `path/file.py:Name`: by path, no package needed."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", ROOT / "recipes" / "envs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


calc = load("calc_tools").calc
guess = load("guess_env")


@pytest.mark.parametrize("expression, result", [
    ("1 + 2 * 3", "7"), ("(3 + 4) * 2.5", "17.5"), ("7 / 2", "3.5"), ("6 / 3", "2"), ("2 ** 10", "1024"),
    ("-3 ** 2", "-9"), ("2 ** -2", "0.25"), ("0.1 + 0.2", "0.3"), (" 12 - 20 ", "-8"), ("10 ** 30", str(10 ** 30))])
def test_calc_evaluates_arithmetic_like_python_does(expression, result):
    assert calc(expression) == result


@pytest.mark.parametrize("expression, error", [
    ("1 / 0", "error: division by zero"), ("0 ** -1", "error: division by zero"),
    ("9 ** 9 ** 9", "error: exponent larger than 100"),   # 9**9 = 387420489 is refused before it is raised to
    ("10 ** 31", "error: result too large"), ("1e30 ** 100", "error: result too large"),  # float overflow
    ("(-8) ** 0.5", "error: the result is not a real number"),
    ("1 +", "error: cannot parse '1 +'"), ("1" * 201, "error: expression longer than 200 characters"),
    ("x + 1", "error: unsupported: 'x' (use numbers, + - * / ** and parentheses)"),
    ("__import__('os').getcwd()", "error: unsupported: \"__import__('os').getcwd()\" (use numbers, + - * / ** "
                                  "and parentheses)"),
    ("True + 1", "error: unsupported: 'True' (use numbers, + - * / ** and parentheses)"),
    ("5 % 3", "error: unsupported: '5 % 3' (use numbers, + - * / ** and parentheses)")])
def test_calc_refuses_everything_else_with_an_error_string_and_never_evaluates_names(expression, error):
    assert calc(expression) == error


def test_calcs_schema_is_what_transformers_makes_from_its_hints_and_docstring():
    get_json_schema = pytest.importorskip("transformers.utils").get_json_schema
    function = get_json_schema(calc)["function"]
    assert function["name"] == "calc"
    assert function["description"] == "Evaluate an arithmetic expression and return the result."
    assert function["parameters"]["required"] == ["expression"]
    assert function["parameters"]["properties"]["expression"]["type"] == "string"


@pytest.mark.parametrize("text, number", [
    ("My guess is 50.", 50), ("Between 10 and 20, so 15", 15), ("1,000", 1000), ("maybe -3", -3), ("7.0", 7),
    ("the range 1-100", 100), ("3.5", None), ("no idea", None)])
def test_the_guess_is_the_last_whole_number_in_the_text(text, number):
    assert guess.last_integer(text) == number


def test_a_guess_game_gives_higher_lower_feedback_and_ends_on_the_secret_with_reward_one():
    opening = [{"role": "user", "content": "Guess my number from 1 to 100."}]
    env = guess.GuessEnv()
    assert check_messages(env.reset({"messages": opening, "reference": " 37\n"}), "reset") == opening
    zero = {"tool_calls": 0, "tool_errors": 0}
    assert check_step(env.step("I say 50")) == (
        [{"role": "user", "content": "50 is wrong: the number is lower. Guess again."}], 0.0, False, zero)
    assert check_step(env.step("hmm")) == ([{"role": "user", "content": "I found no whole number in your reply. "
                                             "End it with your guess, e.g. 'My guess is 50.'"}], 0.0, False, zero)
    assert check_step(env.step("25?"))[0][0]["content"] == "25 is wrong: the number is higher. Guess again."
    assert check_step(env.step("It is 37.")) == (
        [{"role": "user", "content": "Correct, it is 37."}], 1.0, True, zero)
    assert env.turns == 4


def test_an_episode_that_never_guesses_right_sums_to_zero_without_a_final_step():
    env = guess.GuessEnv()
    env.reset({"messages": [], "reference": "7"})
    steps = [env.step(t) for t in ("1", "2", "3")]  # cut off by env.max_turns = 3
    assert [s[1] for s in steps] == [0.0, 0.0, 0.0] and not any(s[2] for s in steps)


def test_every_repo_path_the_environments_page_names_exists():
    from test_readme import repo_paths  # the README's own path scan (tests/unit is on sys.path)

    paths = repo_paths((ROOT / "docs" / "ENVIRONMENTS.md").read_text())
    assert {"recipes/envs/calc_tools.py", "recipes/envs/guess_env.py",
            "llamarl_core/envs/openenv_adapter.py"} <= paths
    assert sorted(p for p in paths if not glob.glob(str(ROOT / p))) == []
