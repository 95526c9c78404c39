"""Tool calls read out of assistant text (envs/parsers.py), expected values written by hand, and
the tools system text checked against the reference chat templates' own wording, rendered by
transformers' template engine."""
import pytest
from transformers.utils.chat_template_utils import _compile_jinja_template

from llamarl_core.config.choices import TOOL_PARSERS
from llamarl_core.envs.parsers import (PARSERS, ParsedCalls, ToolCall, add_tools_prompt, parse_attempts,
                                       parse_tool_calls, tools_system_prompt)


def test_the_parsers_are_exactly_the_config_choices():
    assert set(PARSERS) == set(TOOL_PARSERS)


# hermes ------------------------------------------------------------------------------------------

def test_hermes_reads_one_call_with_whitespace_and_newlines():
    text = 'Let me compute.\n<tool_call>\n  {"name": "calc",\n "arguments": {"expression": "2*3"}}\n</tool_call>'
    assert parse_tool_calls(text, "hermes") == ParsedCalls([ToolCall("calc", {"expression": "2*3"})], [])


def test_hermes_reads_several_calls_and_arguments_written_as_a_json_string():
    text = ('<tool_call>{"name": "calc", "arguments": {"expression": "1+1"}}</tool_call>\n'
            '<tool_call>{"name": "search", "arguments": "{\\"q\\": \\"llamas\\"}"}</tool_call>\n'
            '<tool_call>{"name": "now"}</tool_call>')
    assert parse_tool_calls(text, "hermes").calls == [
        ToolCall("calc", {"expression": "1+1"}), ToolCall("search", {"q": "llamas"}), ToolCall("now", {})]


def test_hermes_text_without_calls_is_a_final_answer():
    assert parse_tool_calls("The answer is {4}. No <tool> here.", "hermes") == ParsedCalls([], [])


def test_hermes_ignores_calls_inside_the_thinking():
    text = '<think>maybe <tool_call>{"name": "a"}</tool_call></think>\nThe answer is 4.'
    assert parse_tool_calls(text, "hermes") == ParsedCalls([], [])


def test_hermes_malformed_calls_give_one_error_each_in_the_order_written():
    text = ('<tool_call>{"name": "calc", "arguments": {"expression": "1"}</tool_call>'   # one } short: the end, char 49
            '<tool_call>{"arguments": {}}</tool_call>'
            '<tool_call>{"name": "calc", "arguments": [1, 2]}</tool_call>'
            '<tool_call>["calc"]</tool_call>'
            '<tool_call>{"name": "calc", "arguments": {"expression": "2"}}</tool_call>'
            '<tool_call>{"name": "calc", "arg')
    assert parse_attempts(text, "hermes") == [
        "tool call 1 is not valid JSON (Expecting ',' delimiter at char 49)",
        'tool call 2 has no "name" string',
        "tool call 3 (calc): arguments must be a JSON object, got list",
        "tool call 4 is not a JSON object",
        ToolCall("calc", {"expression": "2"}),
        "tool call 6: <tool_call> is not closed by </tool_call>",
    ]
    parsed = parse_tool_calls(text, "hermes")
    assert parsed.calls == [ToolCall("calc", {"expression": "2"})] and len(parsed.errors) == 5


# llama3 ------------------------------------------------------------------------------------------

def test_llama3_reads_a_whole_message_call_with_or_without_the_python_tag():
    want = ParsedCalls([ToolCall("calc", {"expression": "2*3"})], [])
    assert parse_tool_calls('{"name": "calc", "parameters": {"expression": "2*3"}}', "llama3") == want
    assert parse_tool_calls('<|python_tag|>{"name": "calc", "parameters": {"expression": "2*3"}}', "llama3") == want
    assert parse_tool_calls('{"name": "calc", "arguments": {"expression": "2*3"}}', "llama3") == want


def test_llama3_reads_calls_joined_by_semicolons_after_some_prose():
    text = ('I will look both up. {"name": "search", "parameters": {"q": "a;b"}} ; '
            '{"name": "calc", "parameters": "{\\"expression\\": \\"1\\"}"};')
    assert parse_tool_calls(text, "llama3") == ParsedCalls(
        [ToolCall("search", {"q": "a;b"}), ToolCall("calc", {"expression": "1"})], [])


@pytest.mark.parametrize("text", [
    "The answer is 42.",
    "So the answer is \\boxed{42}.",
    '{"answer": 42, "name": "Alice"}',            # JSON of its own, not a call: no parameters
    "Set {x | x > 2} has {no json}",
])
def test_llama3_text_that_is_not_a_json_call_is_a_final_answer(text):
    assert parse_tool_calls(text, "llama3") == ParsedCalls([], [])


def test_llama3_malformed_calls_give_one_error_each():
    assert parse_attempts('{"name": "calc", "parameters": {"expression": "1"}', "llama3") == [
        "tool call 1 is not valid JSON (Expecting ',' delimiter at char 50)"]
    assert parse_attempts('<|python_tag|>calc(1)', "llama3") == [
        "tool call 1 is not valid JSON (Expecting value at char 0)"]
    assert parse_attempts('{"parameters": {}}; {"name": 3, "parameters": {}}; {"name": "calc", "parameters": 7};'
                          ' [1]; {"name": "ok", "parameters": {}}', "llama3") == [
        'tool call 1 has no "name" string', 'tool call 2 has no "name" string',
        "tool call 3 (calc): arguments must be a JSON object, got int", "tool call 4 is not a JSON object",
        ToolCall("ok", {})]


def test_an_unknown_parser_is_named():
    with pytest.raises(ValueError, match="unknown tool parser 'xml'"):
        parse_tool_calls("x", "xml")


# the tools system text ---------------------------------------------------------------------------

SCHEMAS = [{"type": "function", "function": {"name": "calc", "description": "Évaluer une expression.",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string", "description": "e"}},
                           "required": ["expression"]}}}]


def test_the_hermes_tools_text_reads_as_the_brief_and_qwen_write_it():
    assert tools_system_prompt(SCHEMAS, "hermes") == (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        '{"type": "function", "function": {"name": "calc", "description": "Évaluer une expression.", '
        '"parameters": {"type": "object", "properties": {"expression": {"type": "string", "description": "e"}}, '
        '"required": ["expression"]}}}\n'
        "</tools>\n\nFor each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


# The tools branch of the Qwen2.5/Qwen3 chat templates' system turn, quoted.
QWEN_SYSTEM = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0].role == 'system' %}"
    "{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- \"# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided "
    "with function signatures within <tools></tools> XML tags:\\n<tools>\" }}"
    "{%- for tool in tools %}{{- \"\\n\" }}{{- tool | tojson }}{%- endfor %}"
    "{{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": "
    "<args-json-object>}\\n</tool_call><|im_end|>\\n\" }}{%- endif %}")

# The system turn of the Llama 3.1 chat template with tools_in_user_message false, quoted.
LLAMA31_SYSTEM = (
    "{%- set system_message = messages[0]['content']|trim %}"
    "{{- \"You have access to the following functions. To call a function, please respond with JSON for a "
    "function call.\" }}"
    "{{- 'Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its "
    "value}.' }}{{- \"Do not use variables.\\n\\n\" }}"
    "{%- for t in tools %}{{- t | tojson(indent=4) }}{{- \"\\n\\n\" }}{%- endfor %}{{- system_message }}")


def test_tools_in_the_system_message_render_as_the_reference_templates_do():
    messages = [{"role": "system", "content": "Be brief. "}, {"role": "user", "content": "2*3?"}]
    qwen = _compile_jinja_template(QWEN_SYSTEM).render(messages=messages, tools=SCHEMAS)
    merged = add_tools_prompt(messages, SCHEMAS, "hermes")
    assert qwen == "<|im_start|>system\n" + merged[0]["content"] + "<|im_end|>\n"
    assert merged[1:] == messages[1:] and messages[0]["content"] == "Be brief. "  # the input is not changed

    llama = _compile_jinja_template(LLAMA31_SYSTEM).render(messages=messages, tools=SCHEMAS)
    assert llama == add_tools_prompt(messages, SCHEMAS, "llama3")[0]["content"]
    assert tools_system_prompt(SCHEMAS, "llama3").endswith('"required": [\n                "expression"\n'
                                                           '            ]\n        }\n    }\n}\n\n')


def test_without_a_system_message_one_is_added_holding_only_the_tools():
    user = [{"role": "user", "content": "hi"}]
    for parser in PARSERS:
        out = add_tools_prompt(user, SCHEMAS, parser)
        assert out == [{"role": "system", "content": tools_system_prompt(SCHEMAS, parser).rstrip("\n")}] + user
