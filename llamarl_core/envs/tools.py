"""Tools as plain Python functions: ``env.tools=path/to/file.py:calc,search`` (or
``package.module:calc,search``).

    def calc(expression: str) -> str:
        '''Evaluate an arithmetic expression.

        Args:
            expression: The expression, e.g. "2 * (3 + 4)"
        '''

A tool's type hints and Google-style docstring are what the model is told about it: the JSON
schema ``apply_chat_template(tools=...)`` expects is made by transformers' own
``get_json_schema``, so llamarl describes a tool exactly as transformers would.

Security rule (as for custom rewards, rewards/custom.py): ``load_tools`` imports the user's
module, which runs it, so it is called only in an environment worker process; so is
``tool_schemas``, which needs the function objects. Paths follow ``rewards.custom.load_module``:
a ``.py`` path is relative to the working directory and its folder goes first on ``sys.path``.
"""
from __future__ import annotations

from typing import Callable

from llamarl_core.rewards.custom import load_module

TOOLS_MODULE = "llamarl_user_tools"  # sys.modules name of a tools .py file (not the reward's)


def parse_tools_spec(spec: str) -> tuple[str, list[str]]:
    """``"file.py:calc,search"`` as ``("file.py", ["calc", "search"])``, else ValueError."""
    target, _, names = spec.rpartition(":")
    fn_names = [n.strip() for n in names.split(",")]
    if not target or not all(n.isidentifier() for n in fn_names):
        raise ValueError(f"env.tools={spec!r}: expected path/to/file.py:fn1,fn2 or package.module:fn1,fn2")
    if len(set(fn_names)) != len(fn_names):
        raise ValueError(f"env.tools={spec!r} names a function twice")
    return target, fn_names


def load_tools(spec: str) -> list[Callable]:
    """The functions ``spec`` names, in its order. Imports user code: call only in a worker process."""
    target, fn_names = parse_tools_spec(spec)
    try:
        module = load_module(target, TOOLS_MODULE)
    except FileNotFoundError as exc:
        raise ValueError(f"env.tools={spec!r}: {exc}") from exc
    except ModuleNotFoundError as exc:
        if exc.name and (target + ".").startswith(exc.name + "."):  # the target itself, not its imports
            raise ValueError(f"env.tools={spec!r}: no module named {exc.name!r}") from exc
        raise
    fns = []
    for name in fn_names:
        fn = getattr(module, name, None)
        if fn is None:
            raise ValueError(f"env.tools={spec!r}: {target} has no function {name!r}")
        if not callable(fn):
            raise ValueError(f"env.tools={spec!r}: {target}:{name} is a {type(fn).__name__}, not a function")
        fns.append(fn)
    return fns


def tool_schemas(fns: list[Callable]) -> list[dict]:
    """One ``{"type": "function", "function": {...}}`` schema per tool (transformers'
    ``get_json_schema``); a tool it cannot describe raises one ValueError naming the function."""
    from transformers.utils import get_json_schema
    from transformers.utils.chat_template_utils import DocstringParsingException, TypeHintParsingException

    schemas = []
    for fn in fns:
        name = getattr(fn, "__name__", repr(fn))
        try:
            schemas.append(get_json_schema(fn))
        except (DocstringParsingException, TypeHintParsingException) as exc:
            raise ValueError(f"tool {name!r} cannot be described to the model: {exc} (a tool needs a type hint "
                             f"on every argument and a Google-style docstring with an Args: line for each)") from exc
    return schemas
