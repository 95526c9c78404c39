"""The one record every data source produces, and the load report for skipped lines.

``Example.prompt`` is the untemplated question; templates (``templates.py``) decide how a
model sees it, so one loaded data set serves plain and chat models alike. ``source`` tells
the templates and fallbacks which family the example comes from (arith, gsm8k, math,
generic).
"""
from __future__ import annotations

from dataclasses import dataclass, field

SOURCES = ("arith", "gsm8k", "math", "generic")


@dataclass(frozen=True)
class Example:
    id: str
    prompt: str  # the question/problem text, untemplated
    reference: str  # the final answer string the verifier compares against
    solution: str | None = None  # worked solution ending the way the verifier reads it
    source: str = "generic"  # arith | gsm8k | math | generic


class DataFormatError(ValueError):
    """A malformed data line; the message names the file and the 1-based line."""


@dataclass
class LoadReport:
    path: str
    num_loaded: int = 0
    num_skipped: int = 0
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (line, reason), first 100

    def note_skip(self, line: int, reason: str) -> None:
        self.num_skipped += 1
        if len(self.skipped) < 100:
            self.skipped.append((line, reason))


class ExampleList(list):
    """A ``list[Example]`` that also carries the ``LoadReport`` of the file it came from."""

    def __init__(self, examples=(), report: LoadReport | None = None) -> None:
        super().__init__(examples)
        self.report = report
