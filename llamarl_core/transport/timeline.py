"""Per-rank activity timeline: what each role was doing, when.

Spans ("generate", "score", "train", "sync", "eval", "warmstart", ...) are written one JSON
line each to `<run_dir>/timeline/<role>_<rank>.jsonl` (the Gantt chart of `llamarl bench`),
summed into busy seconds (the metrics' `busy_s`/`idle_s`), and mirrored into the store's
status key for the controller's live view.
"""
from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager

IDLE_STATES = ("wait",)


class Timeline:
    def __init__(self, run_dir: str, role: str, rank: int, control=None):
        os.makedirs(os.path.join(run_dir, "timeline"), exist_ok=True)
        self.path = os.path.join(run_dir, "timeline", f"{role}_{rank}.jsonl")
        self._file = open(self.path, "a", buffering=1)
        self.role, self.rank, self.control = role, rank, control
        self.t_start = time.time()
        self.busy_s: dict[str, float] = {}

    @contextmanager
    def span(self, state: str, **info):
        t0 = time.time()
        self._status(state, **info)
        try:
            yield
        finally:
            t1 = time.time()
            if state not in IDLE_STATES:
                self.busy_s[state] = self.busy_s.get(state, 0.0) + (t1 - t0)
            self._file.write(json.dumps({"role": self.role, "rank": self.rank, "state": state,
                                         "t0": t0, "t1": t1, **info}) + "\n")

    def _status(self, state: str, **info) -> None:
        if self.control is not None:
            try:
                self.control.set_status(self.role, self.rank, state=state, since=time.time(), **info)
            except Exception:  # the live view must never break a worker
                pass

    def totals(self) -> dict:
        wall = time.time() - self.t_start
        busy = sum(self.busy_s.values())
        return {"busy_s": busy, "idle_s": max(0.0, wall - busy), "wall_s": wall,
                "by_state_s": dict(self.busy_s)}

    def close(self) -> None:
        self._file.close()
