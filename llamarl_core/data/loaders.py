"""JSONL loaders for GSM8K, MATH and generic {prompt, answer} files.

Formats (one JSON object per line; blank lines are ignored):
- ``gsm8k``:   ``{"question", "answer"}``, the answer a worked solution whose last line
               is ``#### N``; reference = N.
- ``math``:    ``{"problem", "solution", "answer"}`` (MATH-500 / prm800k); reference =
               ``answer``, or the solution's last ``\\boxed{}`` when ``answer`` is absent.
- ``generic``: ``{"prompt", "answer"}`` with an optional ``"solution"``.
- ``auto``:    decided per line by which keys are present.
A malformed line raises ``DataFormatError("path:line: reason")``; with
``on_error="skip"`` it is skipped and counted in the returned list's ``.report``.
"""
from __future__ import annotations

import json
import os

from llamarl_core.data.example import DataFormatError, Example, ExampleList, LoadReport
from llamarl_core.rewards.boxed import last_boxed

FORMATS = ("auto", "gsm8k", "math", "generic")


def load_examples(path: str, fmt: str = "auto", on_error: str = "raise") -> ExampleList:
    """All examples of a JSONL file; ``result.report`` counts loaded and skipped lines."""
    if fmt not in FORMATS:
        raise ValueError(f"data format must be one of {FORMATS}, got {fmt!r}")
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"data file not found: {path}")
    report = LoadReport(path=path)
    examples = ExampleList(report=report)
    stem = os.path.splitext(os.path.basename(path))[0]
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                examples.append(_parse_line(line, fmt, f"{stem}-{line_no}"))
            except DataFormatError as exc:
                if on_error == "raise":
                    raise DataFormatError(f"{path}:{line_no}: {exc}") from None
                report.note_skip(line_no, str(exc))
    report.num_loaded = len(examples)
    return examples


def _parse_line(line: str, fmt: str, default_id: str) -> Example:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DataFormatError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(row, dict):
        raise DataFormatError(f"expected a JSON object, got {type(row).__name__}")
    if fmt == "auto":
        fmt = _detect(row)
    row_id = str(row.get("id", row.get("unique_id", default_id)))
    if fmt == "gsm8k":
        question, answer = _field(row, "question"), _field(row, "answer")
        if "####" not in answer:
            raise DataFormatError("field 'answer' has no '#### <final answer>' line")
        reference = answer.rsplit("####", 1)[1].strip()
        if not reference:
            raise DataFormatError("field 'answer' has nothing after '####'")
        return Example(row_id, question, reference, answer, "gsm8k")
    if fmt == "math":
        problem, solution = _field(row, "problem"), _field(row, "solution")
        reference = row.get("answer")
        if reference is None:
            reference = last_boxed(solution)
            if reference is None:
                raise DataFormatError("no field 'answer' and no \\boxed{} in 'solution'")
        elif not isinstance(reference, str) or not reference.strip():
            raise DataFormatError("field 'answer' must be a non-empty string")
        return Example(row_id, problem, reference, solution, "math")
    prompt, reference = _field(row, "prompt"), _field(row, "answer", allow_numbers=True)
    solution = row.get("solution")
    if solution is not None and not isinstance(solution, str):
        raise DataFormatError("field 'solution' must be a string when present")
    return Example(row_id, prompt, reference, solution, "generic")


def _detect(row: dict) -> str:
    if "question" in row and "answer" in row:
        return "gsm8k"
    if "problem" in row:
        return "math"
    if "prompt" in row:
        return "generic"
    raise DataFormatError(
        f"cannot tell the format from keys {sorted(row)[:8]}; expected question+answer "
        "(gsm8k), problem+solution(+answer) (math) or prompt+answer (generic)"
    )


def _field(row: dict, key: str, allow_numbers: bool = False) -> str:
    if key not in row:
        raise DataFormatError(f"missing field {key!r}")
    value = row[key]
    if allow_numbers and isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise DataFormatError(f"field {key!r} must be a non-empty string")
    return value
