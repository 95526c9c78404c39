"""Progress of a long phase (warm start, held-out eval) for the controller's live view.

Written to the store as `progress/<phase>` = {"done", "total"}, at most 5 times a second and
always at the end, so a 1,000-batch eval does not become 1,000 store writes.
"""
from __future__ import annotations

import time

MIN_INTERVAL_S = 0.2


class StoreProgress:
    def __init__(self, control, phase: str):
        self.control, self.key, self._last = control, f"progress/{phase}", 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and done > 0 and now - self._last < MIN_INTERVAL_S:
            return
        self._last = now
        try:
            self.control.set_json(self.key, {"done": done, "total": total})
        except Exception:  # progress is for people; it never breaks a role
            pass
