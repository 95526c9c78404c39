"""Host-side stop handling: EOS/stop tokens end a sequence (token kept), stop strings truncate.

A stop string truncates the returned text just before it (as vLLM does) while `token_ids`
keep the tokens up to and including the one that completed it, so the tokens the trainer
scores are exactly the tokens that were sampled, with their log-probs.
"""
from __future__ import annotations

from typing import Sequence


def first_stop(text: str, stop_strings: Sequence[str]) -> tuple[int, str] | None:
    hits = [(text.find(s), s) for s in stop_strings if s in text]
    return min(hits) if hits else None


def truncate_at_stop_string(token_ids: list[int], decode, stop_strings: Sequence[str]):
    """Return (n_tokens_kept, text) if a stop string occurs in decode(token_ids), else None."""
    text = decode(token_ids)
    hit = first_stop(text, stop_strings)
    if hit is None:
        return None
    position, stop = hit
    lo, hi = 1, len(token_ids)  # smallest prefix whose text already contains the stop string
    while lo < hi:
        mid = (lo + hi) // 2
        if stop in decode(token_ids[:mid]):
            hi = mid
        else:
            lo = mid + 1
    return lo, text[:position]
