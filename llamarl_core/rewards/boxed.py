"""Find the last ``\\boxed{...}`` in a completion in linear time, without recursion.

Design: brace matching is a single left-to-right scan with a depth counter over a capped
tail of the text, so 10,000 nested braces, an unclosed ``\\boxed{`` or megabytes of input
cost at most ``MAX_TAIL_CHARS`` steps. Only the extracted answer (short) is handed to the
symbolic checker in a worker process.
"""
from __future__ import annotations

MAX_TAIL_CHARS = 32768  # the final answer sits at the end of a completion
MAX_BOX_ATTEMPTS = 8  # unclosed boxes tried from the end before giving up (bounds the scan)
_OPENERS = ("\\boxed", "\\fbox")


def last_boxed(text: str) -> str | None:
    """Content of the last complete ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``.

    Also accepts the brace-less form ``\\boxed 5``. Returns None when there is no complete
    box (e.g. an unclosed ``\\boxed{``).
    """
    tail = text[-MAX_TAIL_CHARS:]
    start = max(tail.rfind(opener) for opener in _OPENERS)
    for _ in range(MAX_BOX_ATTEMPTS):
        if start < 0:
            break
        content = _box_content(tail, start)
        if content is not None:
            return content
        start = max(tail.rfind(opener, 0, start) for opener in _OPENERS)
    return None


def _box_content(text: str, start: int) -> str | None:
    i = start + 1
    while i < len(text) and text[i].isalpha():  # skip the command name
        i += 1
    if text.startswith(" ", i) and not text.startswith("{", i):
        end = i + 1
        while end < len(text) and not text[end].isspace() and text[end] not in "$":
            end += 1
        return text[i + 1 : end] or None
    if not text.startswith("{", i):
        return None
    depth = 0
    for j in range(i, len(text)):
        ch = text[j]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    return None
