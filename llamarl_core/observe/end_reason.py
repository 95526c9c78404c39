"""Why a run ended: one word for summary.json, a line of words for people.

    end_reason   who decides   end_detail (what the panel and the console's last lines say)
    max_steps    trainer       run.max_steps=150 reached
    max_time_s   trainer       run.max_time_s=200 reached after 143 of 150 steps
    signal       controller    stopped by SIGTERM
    error        controller    error in role generator rank 0: <what failed>

The trainer writes the first two into summary.json with the rest of the summary; only the
controller sees a signal or a role's death, so it adds the last two to the same file
(`record`), keeping whatever the trainer had written. summary.json's keys: `end_reason`,
`end_detail` and, for an error, `end_role` ("generator rank 0").
"""
from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass

END_REASONS = ("max_steps", "max_time_s", "signal", "error")


@dataclass(frozen=True)
class EndReason:
    reason: str        # one of END_REASONS
    detail: str        # the same in words
    role: str = ""     # error: "generator rank 0" ('' when no role is to blame)

    def fields(self) -> dict:
        out = {"end_reason": self.reason, "end_detail": self.detail}
        return {**out, "end_role": self.role} if self.role else out


def reached_max_steps(max_steps: int) -> EndReason:
    return EndReason("max_steps", f"run.max_steps={max_steps} reached")


def reached_max_time(max_time_s: float, steps: int, max_steps: int) -> EndReason:
    return EndReason("max_time_s", f"run.max_time_s={max_time_s:g} reached after {steps} of {max_steps} steps")


def trainer_end(steps: int, max_steps: int, max_time_s: float) -> EndReason:
    """After the trainer's loop: short of run.max_steps only when the time limit ended it."""
    if steps < max_steps and max_time_s:
        return reached_max_time(max_time_s, steps, max_steps)
    return reached_max_steps(max_steps)


def stopped_by_signal(signum: int) -> EndReason:
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    return EndReason("signal", f"stopped by {name}")


def failed(message: str, role: str | None = None, rank: int | None = None) -> EndReason:
    if role is None:
        return EndReason("error", f"error: {message}")
    who = f"{role} rank {rank}"
    return EndReason("error", f"error in role {who}: {message}", who)


def end_line(summary: dict) -> str | None:
    """'run ended: run.max_time_s=200 reached after 143 of 150 steps' (None: no reason known)."""
    detail = summary.get("end_detail")
    return f"run ended: {detail}" if isinstance(detail, str) and detail else None


def record(run_dir: str, end: EndReason) -> None:
    """Write `end` into run_dir/summary.json, keeping the keys already there (a half-written
    or absent file counts as empty: a failed run may have none)."""
    path = os.path.join(run_dir, "summary.json")
    try:
        with open(path) as f:
            summary = json.load(f)
    except (OSError, ValueError):
        summary = {}
    if not isinstance(summary, dict):
        summary = {}
    summary.update(end.fields())
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(summary, f, indent=2)
    os.replace(tmp, path)
