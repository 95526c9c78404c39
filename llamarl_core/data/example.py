"""The one record every data source produces, and the load report for skipped lines.

``Example.prompt`` is the untemplated question; templates (``templates.py``) decide how a
model sees it, so one loaded data set serves plain and chat models alike. ``source`` tells
the templates and verifiers which family the example comes from (arith, gsm8k, math,
generic). ``fields`` keeps the row as it was read, so a custom reward sees every field of
it (``as_dict``), and ``where`` (``file:line``) lets a later check name the line.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass(frozen=True)
class Example:
    id: str
    prompt: str  # the question/problem text, untemplated (with messages: the last user turn)
    reference: str  # the final answer string the verifier compares against
    solution: str | None = None  # worked solution ending the way the verifier reads it
    source: str = "generic"  # arith (data/arith.py) | gsm8k | math | generic (data/loaders.py's formats)
    fields: Optional[dict] = field(default=None, compare=False, hash=False, repr=False)  # the row as read
    messages: Optional[tuple] = field(default=None, compare=False, hash=False)  # chat turns, when the row has them
    where: str = field(default="", compare=False)  # "file:line" (or "file:row N") it came from

    def as_dict(self) -> dict[str, Any]:
        """What a custom reward receives as ``example``: every field of the row as loaded, plus
        ``id``, ``prompt`` and ``reference`` as llamarl read them (these three win over a row's
        own fields of the same name)."""
        row = dict(self.fields) if self.fields is not None else {
            "solution": self.solution, "source": self.source}
        row.update(id=self.id, prompt=self.prompt, reference=self.reference)
        return row


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
    """A ``list[Example]`` (or of the warm start's conversations) that also carries the
    ``LoadReport`` of the file it came from."""

    def __init__(self, examples=(), report: LoadReport | None = None) -> None:
        super().__init__(examples)
        self.report = report

    def __getitem__(self, index):  # a slice keeps the report (held-out = a file's tail)
        got = super().__getitem__(index)
        return ExampleList(got, self.report) if isinstance(index, slice) else got
