"""Tools as functions (envs/tools.py): loaded from a file or module by name, described to the
model by transformers' own get_json_schema, with one clear error for what is missing."""
import sys

import pytest
from transformers.utils import get_json_schema

from llamarl_core.envs.tools import TOOLS_MODULE, load_tools, tool_schemas

TOOLS_FILE = """
from helper import SCALE   # a neighbour of the file: its folder is first on sys.path

def add(a: int, b: int = 0) -> int:
    '''Add two integers.

    Args:
        a: The first integer
        b: The second integer
    '''
    return (a + b) * SCALE

def shout(text: str) -> str:
    '''Upper-case a text.

    Args:
        text: What to shout (choices: ["hi", "bye"])
    '''
    return text.upper()

NOT_A_FUNCTION = 3
"""


@pytest.fixture
def tools_file(tmp_path, monkeypatch):
    (tmp_path / "helper.py").write_text("SCALE = 10\n")
    (tmp_path / "my_tools.py").write_text(TOOLS_FILE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield "my_tools.py"
    for name in (TOOLS_MODULE, "helper"):
        sys.modules.pop(name, None)


def test_load_tools_returns_the_named_functions_in_order_from_a_relative_py_file(tools_file):
    shout, add = load_tools(f"{tools_file}:shout, add")
    assert (shout.__name__, add.__name__) == ("shout", "add")
    assert add(2, b=3) == 50 and shout("hi") == "HI"


def test_load_tools_from_a_module_in_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "toolpkg").mkdir()
    (tmp_path / "toolpkg" / "__init__.py").write_text("")
    (tmp_path / "toolpkg" / "calc.py").write_text("def double(x: int) -> int:\n    return 2 * x\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    try:
        [double] = load_tools("toolpkg.calc:double")
        assert double(21) == 42
    finally:
        for name in ("toolpkg", "toolpkg.calc"):
            sys.modules.pop(name, None)


@pytest.mark.parametrize("spec,reason", [
    ("my_tools.py:add,missing", "env.tools='my_tools.py:add,missing': my_tools.py has no function 'missing'"),
    ("nope.py:add", "env.tools='nope.py:add': no file "),
    ("my_tools.py:NOT_A_FUNCTION", "my_tools.py:NOT_A_FUNCTION is a int, not a function"),
    ("no_such_pkg_xyz.tools:add", "env.tools='no_such_pkg_xyz.tools:add': no module named 'no_such_pkg_xyz'"),
    ("my_tools.py", "expected path/to/file.py:fn1,fn2"),
    ("my_tools.py:add,", "expected path/to/file.py:fn1,fn2"),
    ("my_tools.py:add,add", "names a function twice"),
])
def test_load_tools_names_the_spec_and_what_is_missing(tools_file, spec, reason):
    with pytest.raises(ValueError) as info:
        load_tools(spec)
    assert reason in str(info.value)


def test_schemas_are_transformers_own_for_documented_functions(tools_file):
    fns = load_tools(f"{tools_file}:add,shout")
    schemas = tool_schemas(fns)
    assert schemas == [get_json_schema(fn) for fn in fns]
    # and what that is, written out: b has a default, so only a is required; choices become an enum
    assert schemas[0] == {"type": "function", "function": {
        "name": "add", "description": "Add two integers.",
        "parameters": {"type": "object", "properties": {
            "a": {"type": "integer", "description": "The first integer"},
            "b": {"type": "integer", "description": "The second integer"}}, "required": ["a"]},
        "return": {"type": "integer"}}}
    assert schemas[1]["function"]["parameters"]["properties"]["text"] == {
        "type": "string", "enum": ["hi", "bye"], "description": "What to shout"}


def no_doc(x: int) -> int:
    return x


def no_hints(x):
    """Echo.

    Args:
        x: Anything
    """
    return x


def undocumented_arg(x: int, y: int) -> int:
    """Add.

    Args:
        x: The first
    """
    return x + y


@pytest.mark.parametrize("fn,missing", [
    (no_doc, "because it has no docstring"),
    (no_hints, "Argument x is missing a type hint"),
    (undocumented_arg, "has no description for the argument 'y'"),
])
def test_a_function_schemas_cannot_describe_gives_one_value_error_naming_it(fn, missing):
    with pytest.raises(ValueError) as info:
        tool_schemas([fn])
    assert f"tool {fn.__name__!r} cannot be described to the model" in str(info.value)
    assert missing in str(info.value)
