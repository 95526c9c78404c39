"""GSM8K-style numeric verifier: the final answer after ``####`` or in a final ``\\boxed{}``,
else the last number.

Design: this check runs in the caller's process, so it must be bounded by construction.
The completion is cut to its last ``MAX_TAIL_CHARS`` characters *before* any search, and
every regex runs on a window of at most that many characters with patterns that cannot
backtrack catastrophically (no nested quantifiers). Numbers are compared as
``decimal.Decimal`` values (exact, no float overflow, no ``int`` digit limit), never by
evaluating text.
"""
from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from llamarl_core.rewards.boxed import last_boxed

MAX_TAIL_CHARS = 4096  # only the end of a completion can hold its final answer
ANSWER_WINDOW_CHARS = 256  # how far after "####" the answer may start
MAX_NUMBER_DIGITS = 512  # longer digit runs are not answers; compared as text instead

# An optional sign, then either comma-grouped thousands (1,234,567) or a plain digit run,
# then an optional decimal part. Alternation of fixed shapes: linear time.
_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
_MINUS_SIGNS = str.maketrans({"\u2212": "-", "\u2013": "-"})


def _to_decimal(text: str) -> Decimal | None:
    """'1,234.50' -> Decimal('1234.50'); None when it is not a finite number."""
    cleaned = text.replace(",", "").replace("$", "").strip().rstrip(".")
    if not cleaned or len(cleaned) > MAX_NUMBER_DIGITS:
        return None
    try:
        value = Decimal(cleaned)
    except (InvalidOperation, ValueError):
        return None
    return value if value.is_finite() else None


def extract_final_number(completion: str) -> str | None:
    """The answer a GSM8K-style completion commits to, as the matched text (or None).

    Rule: the later of the last ``####`` and the last complete ``\\boxed{...}`` in the (tail
    of the) completion decides: after ``####``, the first number of the next
    ``ANSWER_WINDOW_CHARS``; in a box, the first number inside it. With neither, the last
    number anywhere in the tail. ``$``, ``%``, units and thousands separators around the
    number are ignored.
    """
    tail = completion[-MAX_TAIL_CHARS:].translate(_MINUS_SIGNS)
    marker = tail.rfind("####")
    box_at = max(tail.rfind(opener) for opener in ("\\boxed", "\\fbox"))
    if box_at > marker:
        content = last_boxed(tail[box_at:])
        if content is not None:  # an unclosed box after the marker does not count
            match = _NUMBER.search(content.replace("$", ""))
            return match.group(0) if match else None
    if marker >= 0:
        window = tail[marker + 4 : marker + 4 + ANSWER_WINDOW_CHARS]
        match = _NUMBER.search(window.replace("$", ""))
        return match.group(0) if match else None
    last = None
    for last in _NUMBER.finditer(tail):
        pass
    return last.group(0) if last else None


def numbers_equal(predicted: str, reference: str) -> bool:
    """Numeric equality when both parse as numbers, else trimmed-text equality."""
    a, b = _to_decimal(predicted), _to_decimal(reference)
    if a is not None and b is not None:
        return a == b
    return predicted.strip() != "" and predicted.strip() == reference.strip()


def gsm8k_reward(completion: str, reference: str) -> float:
    """1.0 when the completion's final number equals the reference numerically, else 0.0."""
    if not isinstance(completion, str) or not isinstance(reference, str):
        raise TypeError(
            f"gsm8k reward takes (str, str), got ({type(completion).__name__}, "
            f"{type(reference).__name__})"
        )
    predicted = extract_final_number(completion)
    if predicted is None:
        return 0.0
    ref_number = extract_final_number(reference[-MAX_TAIL_CHARS:])
    return 1.0 if numbers_equal(predicted, ref_number or reference) else 0.0
