"""Progress of a long phase (warm start, held-out eval) for the controller's live view.

Written to the store as `progress/<phase>` = {"done", "total"}, at most 5 times a second and
always at the end, so a 1,000-row eval does not become 1,000 store writes. The held-out eval
reports each row as the engine finishes it (eval/evaluate.py), so its bar moves within a batch.

After every held-out eval the trainer writes `progress/heldout_accuracy` = {"start", "latest",
"version"}: the accuracy where RL started and the newest one, which the panel shows side by side.
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


ACCURACY_KEY = "progress/heldout_accuracy"


def accuracy_progress(by_version: dict[int, float]) -> dict:
    """{"start": the first version's accuracy, "latest": the newest one's, "version": newest}."""
    first, newest = min(by_version), max(by_version)
    return {"start": by_version[first], "latest": by_version[newest], "version": newest}


def publish_accuracy(control, by_version: dict[int, float]) -> None:
    if not by_version:
        return
    try:
        control.set_json(ACCURACY_KEY, accuracy_progress(by_version))
    except Exception:  # progress is for people; it never breaks a role
        pass
