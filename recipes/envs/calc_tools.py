"""A calculator tool for the model: `env.tools=recipes/envs/calc_tools.py:calc` (docs/ENVIRONMENTS.md).

A tool is a plain Python function. llamarl shows the model its JSON schema, made from the type
hints and the Google-style docstring by `transformers.utils.get_json_schema` (so both must be
there: one `Args:` line per parameter), calls it in an environment worker when the model asks,
and sends the returned string back as a `tool` message. Return errors as text rather than raise:
the model reads them and can try again; an exception also reaches it as an error message, but
counts as a tool error.

The expression is parsed with `ast` and only numbers, + - * / ** and parentheses are evaluated:
no `eval`, no names, no calls. Exponents and the size of every intermediate result are bounded so
that `9**9**9` cannot hang the worker.
"""
from __future__ import annotations

import ast
import math
import operator

MAX_EXPRESSION_CHARS = 200
MAX_EXPONENT = 100            # |b| in a ** b
MAX_ABS_RESULT = 10.0 ** 30   # any intermediate value beyond this is refused

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


class CalcError(ValueError):
    """A message for the model: what was wrong with its expression."""


def _checked(value):
    if isinstance(value, complex):
        raise CalcError("the result is not a real number")
    if (isinstance(value, float) and not math.isfinite(value)) or abs(value) > MAX_ABS_RESULT:
        raise CalcError("result too large")
    return value


def _evaluate(node):
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _checked(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Div) and right == 0:
            raise CalcError("division by zero")
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise CalcError(f"exponent larger than {MAX_EXPONENT}")
        if isinstance(node.op, ast.Pow) and left == 0 and right < 0:
            raise CalcError("division by zero")
        return _checked(_BINARY[type(node.op)](left, right))
    raise CalcError(f"unsupported: {ast.unparse(node)!r} (use numbers, + - * / ** and parentheses)")


def _format(value) -> str:
    """Integers as integers; a float with an integer value without `.0`; others to 12 significant digits."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 53:
        value = int(value)
    return str(value) if isinstance(value, int) else f"{value:.12g}"


def calc(expression: str) -> str:
    """Evaluate an arithmetic expression and return the result.

    Args:
        expression: An arithmetic expression with numbers, + - * / ** and parentheses, e.g. "(3 + 4) * 2.5".

    Returns:
        The result as text, or a message starting with "error:" saying what was wrong.
    """
    if not isinstance(expression, str):
        return "error: the expression must be a string"
    if len(expression) > MAX_EXPRESSION_CHARS:
        return f"error: expression longer than {MAX_EXPRESSION_CHARS} characters"
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, RecursionError, MemoryError):
        return f"error: cannot parse {expression!r}"
    try:
        return _format(_evaluate(tree.body))
    except CalcError as e:
        return f"error: {e}"
    except OverflowError:  # float ** float beyond the float range
        return "error: result too large"
