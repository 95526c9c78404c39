"""Who waited for whom, from the timelines: the share of a window in which two roles both idle.

A role is busy at time t when any of its ranks is in a busy span (any state but "wait") at
t; it is idle otherwise (waiting, or between spans). `both_idle_s(spans, ("trainer",
"generator"), t0, t1)` is then the time in [t0, t1] when neither role did anything — the
pipeline bubble async RL exists to remove (`pipeline/both_idle_frac` in metrics.jsonl and in
`llamarl bench`'s run stats).

`TimelineTail` (timeline_read.py) reads the `timeline/<role>_<rank>.jsonl` files a run is writing, only the lines
added since its last read, so the trainer can compute the metric at every step cheaply.
"""
from __future__ import annotations

from llamarl_core.transport.timeline import IDLE_STATES
from llamarl_core.transport.timeline_read import TimelineTail  # noqa: F401  (its old home)


def union(intervals) -> list[tuple[float, float]]:
    """Sorted, disjoint cover of `intervals` ((a, b) pairs; empty ones are dropped)."""
    merged: list[tuple[float, float]] = []
    for a, b in sorted((a, b) for a, b in intervals if b > a):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def busy_intervals(spans: list[dict], roles, t0: float, t1: float) -> list[tuple[float, float]]:
    """Where in [t0, t1] some rank of one of `roles` is busy (not in an idle state)."""
    return union((max(s["t0"], t0), min(s["t1"], t1)) for s in spans
                 if s["role"] in roles and s["state"] not in IDLE_STATES)


def both_idle_s(spans: list[dict], roles: tuple[str, str], t0: float, t1: float) -> float:
    """Seconds of [t0, t1] in which no rank of either role is busy."""
    if t1 <= t0:
        return 0.0
    return (t1 - t0) - sum(b - a for a, b in busy_intervals(spans, set(roles), t0, t1))


def both_idle_frac(spans: list[dict], roles: tuple[str, str], t0: float, t1: float) -> float:
    return both_idle_s(spans, roles, t0, t1) / (t1 - t0) if t1 > t0 else 0.0
