"""Examples from local files: JSONL read here line by line, other formats through ``tables.py``.

Formats (which fields hold the prompt and the reference):
- ``gsm8k``:   ``{"question", "answer"}``, the answer a worked solution whose last line
               is ``#### N``; reference = N.
- ``math``:    ``{"problem", "solution", "answer"}`` (MATH-500 / prm800k); reference =
               ``answer``, or the solution's last ``\\boxed{}`` when ``answer`` is absent.
- ``generic``: ``{"prompt", "answer"}`` with an optional ``"solution"``.
- ``auto``:    decided per row by which keys are present (only without ``Keys``).
``Keys`` (``data.prompt_key``, ``data.answer_key``, ``data.messages_key``) rename those
fields; a ``messages`` field holds a chat message list whose last user turn is the prompt
(a list ending with an assistant turn is a bad row: the answer would be in the prompt).
Every field of a row is kept in ``Example.fields`` for a custom reward.

Why JSONL is read here and not by ``datasets``: a bad line must be named by its true line
(lines are split on ``\\n`` only, as editors count them) and column, and so must a byte that
is not UTF-8. A bad row raises ``DataFormatError("path:line: reason")``; with
``on_error="skip"`` it is skipped and counted in the returned list's ``.report``.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Iterator, Optional

from llamarl_core.config.choices import ON_ERROR_MODES
from llamarl_core.data.example import DataFormatError, Example, ExampleList, LoadReport
from llamarl_core.data.tables import is_table, read_rows
from llamarl_core.rewards.boxed import last_boxed

FORMATS = ("auto", "gsm8k", "math", "generic")
_DEFAULT_KEYS = {"gsm8k": ("question", "answer"), "math": ("problem", "answer"),
                 "generic": ("prompt", "answer")}


@dataclass(frozen=True)
class Keys:
    """Where a row keeps its prompt, its reference answer, or its chat messages (None: the
    format's own field names)."""
    prompt: Optional[str] = None
    answer: Optional[str] = None
    messages: Optional[str] = None

    def any(self) -> bool:
        return any((self.prompt, self.answer, self.messages))


def load_examples(path: str, fmt: str = "auto", on_error: str = "raise", keys: Keys = Keys(),
                  split: str = "train") -> ExampleList:
    """All examples of a data file; ``result.report`` counts loaded and skipped rows."""
    if fmt not in FORMATS:
        raise ValueError(f"data format must be one of {FORMATS}, got {fmt!r}")
    stem = os.path.splitext(os.path.basename(path.rstrip("/")))[0]
    return parse_rows(path, file_rows(path, split), on_error, lambda row, where, line_no: _parse_row(
        row, fmt, keys, f"{stem}-{line_no}", f"{path}:{where}"))


def parse_rows(path: str, rows, on_error: str, parse) -> ExampleList:
    """``parse(row, where, line)`` of every row of ``path`` (``file_rows``), in a list carrying
    the ``LoadReport``: a bad row raises naming ``path:where``, or with ``on_error="skip"`` is
    skipped and counted. The examples and the warm start's conversations are both read so."""
    if on_error not in ON_ERROR_MODES:
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    report = LoadReport(path=path)
    out = ExampleList(report=report)
    for where, line_no, row in rows:
        try:
            if isinstance(row, DataFormatError):
                raise row
            out.append(parse(row, where, line_no))
        except DataFormatError as exc:
            if on_error == "raise":
                raise DataFormatError(f"{path}:{where}: {exc}") from None
            report.note_skip(line_no, str(exc))
    report.num_loaded = len(out)
    return out


def file_rows(path: str, split: str = "train") -> Iterator[tuple[str, int, object]]:
    """(where, line, row or the DataFormatError of that line) of a JSONL file or a table
    (`tables.py`); FileNotFoundError before any row when there is no such file."""
    if not (os.path.isfile(path) or (os.path.isdir(path) and is_table(path))):
        raise FileNotFoundError(f"data file not found: {path}")
    return _table_rows(path, split) if is_table(path) else _jsonl_rows(path)


def _jsonl_rows(path: str) -> Iterator[tuple[str, int, object]]:
    """(where, line, row or the DataFormatError of that line), blank lines left out."""
    with open(path, "rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            if line_no == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]  # a UTF-8 byte-order mark
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                column = len(raw[:exc.start].decode("utf-8", errors="replace")) + 1
                yield str(line_no), line_no, DataFormatError(
                    f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {column})")
                continue
            if not line.strip():
                continue
            try:
                yield str(line_no), line_no, json.loads(line)
            except json.JSONDecodeError as exc:
                yield str(line_no), line_no, DataFormatError(f"not valid JSON ({exc.msg} at column {exc.colno})")


def _table_rows(path: str, split: str) -> Iterator[tuple[str, int, object]]:
    for i, row in enumerate(read_rows(path, split), start=1):
        yield f"row {i}", i, row


def _parse_row(row, fmt: str, keys: Keys, default_id: str, where: str) -> Example:
    if not isinstance(row, dict):
        raise DataFormatError(f"expected a JSON object, got {type(row).__name__}")
    if fmt == "auto":
        fmt = "generic" if keys.any() else _detect(row)
    prompt_key, answer_key = keys.prompt or _DEFAULT_KEYS[fmt][0], keys.answer or _DEFAULT_KEYS[fmt][1]
    row_id = str(row.get("id", row.get("unique_id", default_id)))
    messages = None
    if keys.messages:
        messages = _messages(row, keys.messages)
        prompt = _last_user_turn(messages, keys.messages)
    else:
        prompt = _field(row, prompt_key, "data.prompt_key")
    common = dict(fields=row, messages=messages, where=where)
    if fmt == "gsm8k":
        answer = _field(row, answer_key, "data.answer_key")
        if "####" not in answer:
            raise DataFormatError(f"field {answer_key!r} has no '#### <final answer>' line")
        reference = answer.rsplit("####", 1)[1].strip()
        if not reference:
            raise DataFormatError(f"field {answer_key!r} has nothing after '####'")
        return Example(row_id, prompt, reference, answer, "gsm8k", **common)
    if fmt == "math":
        solution = _field(row, "solution", "the math format")
        reference = row.get(answer_key)
        if reference is None:
            reference = last_boxed(solution)
            if reference is None:
                raise DataFormatError(f"no field {answer_key!r} and no \\boxed{{}} in 'solution'")
        elif not isinstance(reference, str) or not reference.strip():
            raise DataFormatError(f"field {answer_key!r} must be a non-empty string")
        return Example(row_id, prompt, reference, solution, "math", **common)
    reference = _field(row, answer_key, "data.answer_key", any_value=True)
    solution = row.get("solution")
    if solution is not None and not isinstance(solution, str):
        raise DataFormatError("field 'solution' must be a string when present")
    return Example(row_id, prompt, reference, solution, "generic", **common)


def _detect(row: dict) -> str:
    if "question" in row and "answer" in row:
        return "gsm8k"
    if "problem" in row:
        return "math"
    if "prompt" in row:
        return "generic"
    raise DataFormatError(
        f"cannot tell the format from keys {sorted(row)[:12]}; expected question+answer "
        "(gsm8k), problem+solution(+answer) (math) or prompt+answer (generic), or name the "
        "fields with data.prompt_key=... data.answer_key=... (or data.messages_key=...)"
    )


def _field(row: dict, key: str, setting: str, any_value: bool = False) -> str:
    """The field as text. `any_value`: numbers become their text, lists/objects their JSON."""
    if key not in row:
        raise DataFormatError(f"missing field {key!r} ({setting}); the row has keys {sorted(row)[:12]}")
    value = row[key]
    if any_value and not isinstance(value, (str, bool)) and value is not None:
        value = str(value) if isinstance(value, (int, float)) else json.dumps(value, ensure_ascii=False)
    if not isinstance(value, str) or not value.strip():
        raise DataFormatError(f"field {key!r} must be a non-empty string, got {value!r:.60}")
    return value


def _messages(row: dict, key: str) -> tuple:
    if key not in row:
        raise DataFormatError(f"missing field {key!r} (data.messages_key); the row has keys {sorted(row)[:12]}")
    value = row[key]
    ok = isinstance(value, list) and value and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in value)
    if not ok:
        raise DataFormatError(f"field {key!r} must be a non-empty list of "
                              f"{{\"role\": str, \"content\": str}} messages")
    return tuple({"role": m["role"], "content": m["content"]} for m in value)


def _last_user_turn(messages: tuple, key: str) -> str:
    if messages[-1]["role"] == "assistant":  # rendered as the prompt, the answer would leak into it
        raise DataFormatError(f"field {key!r} ends with an assistant turn: it would be in the prompt, "
                              "so the model could copy the answer; end each row's chat with the user turn")
    for message in reversed(messages):
        if message["role"] == "user" and message["content"].strip():
            return message["content"]
    raise DataFormatError(f"field {key!r} has no non-empty user message")
