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
        self._open: list[dict] = []  # spans not yet ended, outermost first

    @contextmanager
    def span(self, state: str, **info):
        """One span of `state`; `split` may cut a long one into segments as it runs."""
        seg = {"state": state, "t0": time.time(), "info": info}
        self._open.append(seg)
        self._status(state, **info)
        try:
            yield
        finally:
            self._open.pop()  # spans nest (one thread, context managers): this one is the last
            self._write(seg, time.time())

    def split(self, **info) -> None:
        """End the outermost open span's segment now and go on in a new one (with `info`
        updated). A streaming generator's one "generate" span can last the whole run; cut at
        each chunk's end, its busy time reaches the busy seconds it publishes and the
        timeline file (`pipeline/both_idle_frac`) while it runs, not only when it ends."""
        if not self._open:
            return
        seg, now = self._open[0], time.time()
        self._write(seg, now)
        seg["t0"], seg["info"] = now, {**seg["info"], **info}

    def _write(self, seg: dict, t1: float) -> None:
        state, t0 = seg["state"], seg["t0"]
        if state not in IDLE_STATES:
            self.busy_s[state] = self.busy_s.get(state, 0.0) + (t1 - t0)
        self._file.write(json.dumps({"role": self.role, "rank": self.rank, "state": state,
                                     "t0": t0, "t1": t1, **seg["info"]}) + "\n")

    def _status(self, state: str, **info) -> None:
        if self.control is not None:
            try:
                self.control.set_status(self.role, self.rank, state=state, since=time.time(), **info)
            except Exception:  # the live view must never break a worker
                pass

    def totals(self) -> dict:
        """Busy and idle seconds since the start, the outermost open span's time so far included."""
        now = time.time()
        wall = now - self.t_start
        seg = self._open[0] if self._open else None
        running = now - seg["t0"] if seg is not None and seg["state"] not in IDLE_STATES else 0.0
        busy = sum(self.busy_s.values()) + running
        return {"busy_s": busy, "idle_s": max(0.0, wall - busy), "wall_s": wall,
                "by_state_s": dict(self.busy_s)}

    def close(self) -> None:
        self._file.close()
