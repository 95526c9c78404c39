"""What a reward value may be: the one check every custom reward's score passes, made in the
worker where the value is produced (#44: ±1e308 passed the old finite check and overflowed the
group's advantage to NaN; the string "1e308" counted as solved)."""
from __future__ import annotations

import math


def checked_reward(value, max_abs: float) -> tuple[float, str | None]:
    """(score, None) for a usable reward, else (0.0, why not). A usable reward is a real number
    (int, float, a numpy or 0-d torch scalar; a bool counts as 1.0 / 0.0, as ``return answer ==
    reference`` means) that is finite with |r| <= ``max_abs``. A string is refused even when it
    parses ("1e308"): a reward that returns text has a bug, and far-out values overflow the
    group's advantage to NaN."""
    why = f"a reward must be a finite number with |r| <= reward.max_abs={max_abs:g}"
    described = f"{_short_repr(value)} (a {type(value).__name__})"
    if isinstance(value, (str, bytes, bytearray)):
        return 0.0, f"returned {described}: {why}"
    try:
        score = float(value)
    except (TypeError, ValueError, RuntimeError):  # RuntimeError: a torch tensor of many values
        return 0.0, f"returned {described}: {why}"
    if not math.isfinite(score) or abs(score) > max_abs:
        return 0.0, f"returned {described}: {why}"
    return score, None


def _short_repr(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
