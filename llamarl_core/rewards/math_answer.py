"""MATH-style verifier: the last ``\\boxed{}`` answer, checked for equivalence by math-verify.

Split in two on purpose:
- ``prepare_math`` runs in the caller's process and is bounded (linear scan of a capped
  tail, see ``boxed.py``). It settles the easy cases: no box -> 0.0, the same text as the
  reference after whitespace normalisation -> 1.0.
- ``check_math_equivalence`` runs only inside a reward worker process (``worker.py``),
  where the caller enforces a wall-clock timeout by killing the process. math-verify's own
  ``signal.alarm`` timeouts are switched off (``parsing_timeout=None``,
  ``timeout_seconds=None``): signals only work on a main thread, and the process-level
  timeout is the one that holds whatever the input.

Only ``LatexExtractionConfig`` is used: math-verify's plain-expression path goes through
``sympy.parse_expr``, which ``eval``s text, and model output is never evaluated.
"""
from __future__ import annotations

import re

from llamarl_core.rewards.boxed import last_boxed

MAX_ANSWER_CHARS = 2000  # a boxed answer longer than this is not a MATH answer

_SPACES = re.compile(r"\s+")


def _normalise(text: str) -> str:
    text = text.replace("\\left", "").replace("\\right", "").replace("\\!", "")
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    return _SPACES.sub("", text).strip("$ .")


def prepare_math(completion: str, reference: str) -> float | tuple[str, str]:
    """A final score, or the (answer, reference) pair still to check in a worker."""
    if not isinstance(completion, str) or not isinstance(reference, str):
        raise TypeError(
            f"math reward takes (str, str), got ({type(completion).__name__}, "
            f"{type(reference).__name__})"
        )
    answer = last_boxed(completion)
    if answer is None or not answer.strip() or len(answer) > MAX_ANSWER_CHARS:
        return 0.0
    if "\x00" in answer:
        return 0.0
    if _normalise(answer) == _normalise(reference):
        return 1.0
    return (answer, reference[:MAX_ANSWER_CHARS])


def prepare_math_symbolic(completion: str, reference: str) -> float | tuple[str, str]:
    """Like ``prepare_math`` without the text fast path: every boxed answer goes to
    math-verify. Used to verify the verifier on real data, not for training."""
    prepared = prepare_math(completion, reference)
    if prepared == 1.0:
        return (last_boxed(completion), reference[:MAX_ANSWER_CHARS])
    return prepared


def check_math_equivalence(answer: str, reference: str) -> float:
    """math-verify equivalence of two LaTeX answers. Call only in a killable worker."""
    from math_verify import LatexExtractionConfig, parse, verify

    config = [LatexExtractionConfig(boxed_match_priority=0)]
    gold = parse(f"\\boxed{{{reference}}}", extraction_config=config, parsing_timeout=None)
    pred = parse(f"\\boxed{{{answer}}}", extraction_config=config, parsing_timeout=None)
    if not gold or not pred:
        return 0.0
    return 1.0 if verify(gold, pred, timeout_seconds=None) else 0.0


def warm_up_math() -> None:
    """Import math-verify and its parser once, so the first timed item is not an import."""
    check_math_equivalence("1", "1")
