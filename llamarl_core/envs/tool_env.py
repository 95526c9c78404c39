"""The built-in tool environment: ``env.tools`` set without ``env.entry``.

Each assistant turn is read for tool calls (envs/parsers.py); every call is run and answered
with one ``tool`` message, in the order the calls were written, so a chat template that pairs
results with calls by position pairs them right. A turn without calls is the final answer:
the episode ends with no reward of its own, and the run's ``data.reward`` scores that turn.

Whatever goes wrong with a call (malformed, unknown tool, arguments that do not fit the
signature, the tool raising) becomes a one-line ``error: ...`` tool message the model can
read and react to, and counts in ``tool_errors``; it never ends the episode. Runs in an
environment worker process, like the tools themselves (envs/tools.py).
"""
from __future__ import annotations

import inspect
import json
from typing import Callable

from llamarl_core.envs.parsers import PARSERS, ToolCall, parse_attempts


def cut_text(text: str, max_chars: int) -> str:
    """``text`` when it fits in ``max_chars``, else its start and a marker, ``max_chars`` in all."""
    if len(text) <= max_chars:
        return text
    keep = max_chars - len(f"\n[... {len(text)} more chars cut]")  # the marker is never longer
    if keep <= 0:
        return text[:max_chars]
    return text[:keep] + f"\n[... {len(text) - keep} more chars cut]"


def result_text(result) -> str:
    """A tool's return value as message text: str as is, dicts and lists as JSON, else str()."""
    if isinstance(result, str):
        return result
    if isinstance(result, (dict, list)):
        return json.dumps(result, ensure_ascii=False, default=str)
    return str(result)


def _one_line(exc: BaseException) -> str:
    message = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


class ToolEnv:
    """Runs the calls in each assistant turn with ``tools``, matched by function name."""

    def __init__(self, tools: list[Callable], parser: str = "hermes", max_message_chars: int = 4000):
        if parser not in PARSERS:
            raise ValueError(f"unknown tool parser {parser!r}; one of {sorted(PARSERS)}")
        self.tools: dict[str, Callable] = {}
        for fn in tools:
            name = getattr(fn, "__name__", None)
            if not name or name in self.tools:
                raise ValueError(f"tools need distinct function names, got {name!r} twice or unnamed")
            self.tools[name] = fn
        self.parser = parser
        self.max_message_chars = max_message_chars

    def reset(self, example: dict) -> list[dict]:
        return list(example["messages"])

    def step(self, assistant_text: str) -> tuple[list[dict], None, bool, dict]:
        attempts = parse_attempts(assistant_text, self.parser)
        if not attempts:
            return [], None, True, {"tool_calls": 0, "tool_errors": 0}
        messages, errors = [], 0
        for attempt in attempts:
            if isinstance(attempt, ToolCall):
                message, ok = self._run(attempt)
            else:
                message, ok = {"role": "tool", "content": f"error: {attempt}"}, False
            message["content"] = cut_text(message["content"], self.max_message_chars)
            messages.append(message)
            errors += not ok
        return messages, None, False, {"tool_calls": len(attempts), "tool_errors": errors}

    def _run(self, call: ToolCall) -> tuple[dict, bool]:
        """The tool message answering ``call``, and whether the call succeeded."""
        def error(text: str):
            return {"role": "tool", "name": call.name, "content": f"error: {text}"}, False

        fn = self.tools.get(call.name)
        if fn is None:
            return error(f"unknown tool {call.name!r}; the tools are {', '.join(sorted(self.tools))}")
        try:
            inspect.signature(fn).bind(**call.arguments)
        except TypeError as exc:
            return error(f"bad arguments for {call.name}: {' '.join(str(exc).split())}")
        try:
            result = fn(**call.arguments)
        except Exception as exc:  # noqa: BLE001 - a tool's failure is the model's to read
            return error(f"{call.name} raised {_one_line(exc)}")
        return {"role": "tool", "name": call.name, "content": result_text(result)}, True
