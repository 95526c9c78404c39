"""Tool calls read out of an assistant's text, in the format its chat template taught it
(``env.tool_parser``), and the system text that teaches that format when a template ignores
``tools=``.

hermes (Qwen2.5, Qwen3, SmolLM3): each call is ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
    anywhere in the text; an unclosed ``<tool_call>`` is a malformed call.
llama3 (Llama 3.1 JSON tool calls): the message, optionally after ``<|python_tag|>``, is
    ``{"name": ..., "parameters": {...}}``, or several joined by ``;``. vLLM's ``llama3_json``
    parser takes the first JSON object in the text and treats anything that fails as plain text;
    here the first JSON object with a "parameters" or "arguments" key starts the calls, and so
    does a ``{"name":`` (or ``{"parameters":``, ``{"arguments":``) that is not valid JSON, as a
    malformed call; after ``<|python_tag|>`` everything is calls. So a final answer that merely
    contains braces or JSON of its own stays an answer, while a broken call is told back to the
    model instead of silently ending the episode.

Both: "arguments" (or "parameters") may be a JSON string holding an object, as some models write;
missing means no arguments. Text before the last ``</think>`` (a reasoning model's thinking) is
not read. A malformed call becomes one short error string, shown to the model.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Callable, Union

PYTHON_TAG = "<|python_tag|>"
_CALL_START = re.compile(r'\{\s*"(name|parameters|arguments)"\s*:')


@dataclass
class ToolCall:
    name: str
    arguments: dict


@dataclass
class ParsedCalls:
    calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


Attempt = Union[ToolCall, str]  # a call, or why an attempted call is malformed


def _answer_part(text: str) -> str:
    return text.rpartition("</think>")[2] if "</think>" in text else text


def _to_call(obj, k: int) -> Attempt:
    """A decoded JSON value as the k-th call (1-based), or the error saying why it is not one."""
    if not isinstance(obj, dict):
        return f"tool call {k} is not a JSON object"
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return f"tool call {k} has no \"name\" string"
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            pass
    if not isinstance(args, dict):
        return f"tool call {k} ({name}): arguments must be a JSON object, got {type(args).__name__}"
    return ToolCall(name, args)


def _bad_json(k: int, exc: json.JSONDecodeError, start: int = 0) -> str:
    return f"tool call {k} is not valid JSON ({exc.msg} at char {exc.pos - start})"


def parse_hermes(text: str) -> list[Attempt]:
    out, pos = [], 0
    while (start := text.find("<tool_call>", pos)) >= 0:
        k = len(out) + 1
        end = text.find("</tool_call>", start)
        if end < 0:
            out.append(f"tool call {k}: <tool_call> is not closed by </tool_call>")
            break
        body = text[start + len("<tool_call>"):end].strip()
        pos = end + len("</tool_call>")
        try:
            out.append(_to_call(json.loads(body), k))
        except json.JSONDecodeError as exc:
            out.append(_bad_json(k, exc))
    return out


def _json_chain(body: str, pos: int) -> list[Attempt]:
    """The ``;``-joined JSON calls from ``body[pos:]``; text after the last one is ignored."""
    decoder, out = json.JSONDecoder(), []
    while True:
        k = len(out) + 1
        try:
            obj, end = decoder.raw_decode(body, pos)
        except json.JSONDecodeError as exc:
            out.append(_bad_json(k, exc, pos))
            return out
        out.append(_to_call(obj, k))
        rest = body[end:].lstrip()
        if not rest.startswith(";"):
            return out
        pos = len(body) - len(rest) + 1
        while pos < len(body) and body[pos].isspace():
            pos += 1
        if pos == len(body):  # a trailing ";"
            return out


def parse_llama3(text: str) -> list[Attempt]:
    body = text.strip()
    if body.startswith(PYTHON_TAG):  # the model said it is calling: all that follows is calls
        return _json_chain(body[len(PYTHON_TAG):].lstrip(), 0)
    decoder, pos = json.JSONDecoder(), body.find("{")
    while pos >= 0:
        try:
            obj, end = decoder.raw_decode(body, pos)
        except json.JSONDecodeError:
            if _CALL_START.match(body, pos):
                return _json_chain(body, pos)  # a broken call: reported, not taken for prose
            end = pos + 1
        else:
            if isinstance(obj, dict) and ("parameters" in obj or "arguments" in obj):
                return _json_chain(body, pos)
        pos = body.find("{", end)  # past a JSON value that is not a call, nested ones included
    return []


PARSERS: dict[str, Callable[[str], list[Attempt]]] = {"hermes": parse_hermes, "llama3": parse_llama3}


def parse_attempts(text: str, parser: str) -> list[Attempt]:
    """Every attempted call in ``text`` in the order written: a ToolCall or an error string."""
    if parser not in PARSERS:
        raise ValueError(f"unknown tool parser {parser!r}; one of {sorted(PARSERS)}")
    return PARSERS[parser](_answer_part(text))


def parse_tool_calls(text: str, parser: str) -> ParsedCalls:
    """The well-formed calls in ``text`` and one error per malformed one (no calls, no errors:
    the text is a final answer)."""
    attempts = parse_attempts(text, parser)
    return ParsedCalls([a for a in attempts if isinstance(a, ToolCall)], [a for a in attempts if isinstance(a, str)])


_HERMES_HEAD = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
_HERMES_TAIL = ("\n</tools>\n\nFor each function call, return a json object with function name and arguments "
                "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
                "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>")
_LLAMA3_HEAD = ("You have access to the following functions. To call a function, please respond with JSON for a "
                "function call.Respond in the format {\"name\": function name, \"parameters\": dictionary of argument "
                "name and its value}.Do not use variables.\n\n")


def tools_system_prompt(schemas: list[dict], parser: str) -> str:
    """What a system message says about the tools, word for word as the parser's reference chat
    template renders it: Qwen2.5's for hermes (one JSON per line), Llama 3.1's system-message
    form for llama3 (each tool as indented JSON, a blank line after each). For checkpoints whose
    template ignores ``tools=``; see ``add_tools_prompt`` for where the text goes."""
    if parser == "hermes":
        return _HERMES_HEAD + "".join("\n" + json.dumps(s, ensure_ascii=False) for s in schemas) + _HERMES_TAIL
    if parser == "llama3":
        return _LLAMA3_HEAD + "".join(json.dumps(s, ensure_ascii=False, indent=4) + "\n\n" for s in schemas)
    raise ValueError(f"unknown tool parser {parser!r}; one of {sorted(PARSERS)}")


def add_tools_prompt(messages: list[dict], schemas: list[dict], parser: str) -> list[dict]:
    """``messages`` with the tools text in the system message (one is added when absent): after
    the system text for hermes (Qwen2.5 joins them with a blank line), before it for llama3."""
    tools_text = tools_system_prompt(schemas, parser)
    out = [dict(m) for m in messages]
    if not out or out[0].get("role") != "system":
        return [{"role": "system", "content": tools_text.rstrip("\n")}] + out
    own = out[0].get("content", "")
    out[0]["content"] = (own + "\n\n" + tools_text) if parser == "hermes" else (tools_text + own.strip())
    return out
