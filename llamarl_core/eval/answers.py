"""The final answer a completion commits to, normalised, for majority voting (maj@k).

Voting needs a key per sample, not a verdict: the same extraction rules the verifiers
use (``rewards/numeric.py`` for ``#### N`` / last number, ``rewards/boxed.py`` for
``\\boxed{}``), then a cheap normalisation so ``1,000`` and ``1000.0`` vote together.
Symbolically equal but differently written LaTeX (``\\frac12`` vs ``0.5``) count as
different answers: clustering by math-verify would cost a worker call per pair.
"""
from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Callable, Optional

from llamarl_core.rewards.boxed import last_boxed
from llamarl_core.rewards.numeric import extract_final_number

_SPACES = re.compile(r"\s+")


def numeric_answer(completion: str) -> Optional[str]:
    """GSM8K/arith: the final number as a canonical decimal string ('1,000.0' -> '1000')."""
    text = extract_final_number(completion)
    if text is None:
        return None
    try:
        value = Decimal(text.replace(",", ""))
    except (InvalidOperation, ValueError):
        return text.strip()
    if not value.is_finite():
        return text.strip()
    return "0" if value == 0 else f"{value.normalize():f}"  # normalize() alone gives '1E+3'


def boxed_answer(completion: str) -> Optional[str]:
    """MATH: the last ``\\boxed{}`` content without spacing and ``\\left``/``\\right``."""
    box = last_boxed(completion)
    if box is None:
        return None
    box = box.replace("\\left", "").replace("\\right", "").replace("\\dfrac", "\\frac")
    box = _SPACES.sub("", box).strip("$ .")
    return box or None


def answer_fn_for(source: str) -> Callable[[str], Optional[str]]:
    """The voting key for an example family (``Example.source``)."""
    return boxed_answer if source == "math" else numeric_answer
