"""The built-in tool environment (envs/tool_env.py): calls run in the order written, every
failure is a tool message the model reads and a counted error, a turn without calls ends it."""
import ast
import json
import operator

import pytest

from llamarl_core.envs.protocol import Environment, check_step
from llamarl_core.envs.tool_env import ToolEnv, cut_text, result_text

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.USub: operator.neg}


def _value(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_value(node.left), _value(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_value(node.operand))
    raise ValueError(f"not arithmetic: {ast.dump(node)[:40]}")


def calc(expression: str) -> float:
    """Evaluate an arithmetic expression (+ - * / and parentheses).

    Args:
        expression: The expression, e.g. "2 * (3 + 4)"
    """
    return _value(ast.parse(expression, mode="eval").body)


def stats(numbers: list[float]) -> dict:
    """Sum and count of some numbers.

    Args:
        numbers: The numbers
    """
    return {"sum": sum(numbers), "n": len(numbers)}


def long_text(n: int) -> str:
    """A long text.

    Args:
        n: How many characters
    """
    return "x" * n


def call(name, args):
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": args})}\n</tool_call>'


@pytest.fixture
def env():
    return ToolEnv([calc, stats, long_text], parser="hermes", max_message_chars=40)


def test_reset_returns_the_opening_llamarl_built(env):
    opening = [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "2*(3+4)?"}]
    assert env.reset({"id": "a", "prompt": "2*(3+4)?", "messages": opening}) == opening
    assert isinstance(env, Environment)


def test_a_turn_with_two_calls_answers_each_in_order(env):
    text = ("Let me work it out.\n" + call("calc", {"expression": "2 * (3 + 4)"}) + "\n"
            + call("stats", {"numbers": [1, 2.5]}))
    assert env.step(text) == (
        [{"role": "tool", "name": "calc", "content": "14"},
         {"role": "tool", "name": "stats", "content": '{"sum": 3.5, "n": 2}'}],
        None, False, {"tool_calls": 2, "tool_errors": 0})


def test_unknown_tools_bad_arguments_and_raising_tools_are_errors_the_model_reads():
    env = ToolEnv([calc, stats, long_text])
    text = (call("search", {"q": "x"}) + call("calc", {"expr": "1"}) + call("calc", {"expression": "1/0"})
            + call("calc", {"expression": "__import__('os')"}) + "<tool_call>{oops}</tool_call>"
            + call("calc", {"expression": "-2+1"}))
    messages, reward, done, counts = check_step(env.step(text))
    assert [m["content"] for m in messages] == [
        "error: unknown tool 'search'; the tools are calc, long_text, stats",
        "error: bad arguments for calc: missing a required argument: 'expression'",
        "error: calc raised ZeroDivisionError: division by zero",
        "error: calc raised ValueError: not arithmetic: Call(func=Name(id='__import__', ctx=Load",  # its first 40 chars
        "error: tool call 5 is not valid JSON (Expecting property name enclosed in double quotes at char 1)",
        "-1",
    ]
    assert [m.get("name") for m in messages] == ["search", "calc", "calc", "calc", None, "calc"]
    assert (reward, done, counts) == (None, False, {"tool_calls": 6, "tool_errors": 5})


def test_a_turn_without_calls_is_the_final_answer(env):
    assert env.step("<think>I could call calc.</think>The answer is 14.") == (
        [], None, True, {"tool_calls": 0, "tool_errors": 0})


def test_long_results_are_cut_to_max_message_chars_with_a_marker(env):
    [message], _, _, _ = env.step(call("long_text", {"n": 100}))
    # the marker for 100 chars is 25 long, so 40 - 25 = 15 chars are kept and 85 cut
    assert message["content"] == "x" * 15 + "\n[... 85 more chars cut]"
    [message], _, _, _ = env.step(call("long_text", {"n": 40}))
    assert message["content"] == "x" * 40


def test_llama3_calls_work_the_same():
    env = ToolEnv([calc], parser="llama3")
    text = '<|python_tag|>{"name": "calc", "parameters": {"expression": "6*7"}}'
    assert env.step(text) == ([{"role": "tool", "name": "calc", "content": "42"}], None, False,
                              {"tool_calls": 1, "tool_errors": 0})


def test_results_become_text():
    assert (result_text("a"), result_text([1, "é"]), result_text(None), result_text(2.5)) == (
        "a", '[1, "é"]', "None", "2.5")
    assert cut_text("abcdef", 3) == "abc"  # no room for a marker: just the start


def test_tools_need_distinct_names_and_a_known_parser():
    with pytest.raises(ValueError, match="distinct function names"):
        ToolEnv([calc, calc])
    with pytest.raises(ValueError, match="unknown tool parser 'xml'"):
        ToolEnv([calc], parser="xml")
