"""Whether a run can learn, from its metrics lines: the words for a run that learns nothing.

A group-relative advantage is 0 whenever a group's rewards are equal, so two cases train
nothing and look like a normal run with reward 0.000:
- every sample of a step errored (or timed out) in the reward: all scored 0;
- the reward was one value for every sample for `CONSTANT_REWARD_STEPS` steps in a row.
`LearningSignal` is fed each step's metrics line (`observe`) and says so in words
(`warnings`: metrics.jsonl's and the live view's `warnings`, summary.json's `warnings`).
A run whose every scored sample errored ends with exit 1 (`all_errored`, raised by the trainer).

The reward counters are cumulative since each reward rank's start (`reward/errors`,
`reward/timeouts`, `reward/scored`: metrics_log.py); a step is judged on what was scored
since the last line, and a counter that goes down (a restarted rank) starts again from 0.
The reward role publishes its counters when a chunk is whole, so a line may see no new
samples: that step keeps the previous step's verdict.
"""
from __future__ import annotations

CONSTANT_REWARD_STEPS = 10  # steps in a row of one reward value for every sample before saying so


def last_line(text: str | None) -> str:
    """The last non-empty line of a traceback: `ValueError: boom`."""
    lines = [l.strip() for l in (text or "").splitlines() if l.strip()]
    return lines[-1] if lines else ""


def _steps(first: int, last: int) -> str:
    return f"step {first}" if first == last else f"steps {first}-{last}"


class RewardsAllErrored(RuntimeError):
    """Every sample the reward scored in this run errored: the run learned nothing."""


class LearningSignal:
    def __init__(self, constant_steps: int = CONSTANT_REWARD_STEPS):
        self.constant_steps = constant_steps
        self.failed = self.scored = 0          # over the run, across reward restarts
        self._seen = (0, 0)                    # (failed, scored) as the last line reported them
        self.first_error = ""                  # the first reward traceback's last line
        self.errored_spans: list[list[int]] = []   # [first step, last step] with every sample errored
        self.constant_spans: list[list] = []       # [first step, last step, value]
        self._errored = False                  # the last step's verdict

    def observe(self, line: dict) -> None:
        step = int(line["step"])
        failed = int(line.get("reward/errors", 0)) + int(line.get("reward/timeouts", 0))
        scored = int(line.get("reward/scored", 0))
        if scored < self._seen[1]:  # a restarted reward rank counts from 0 again
            self._seen = (0, 0)
        new_failed, new_scored = failed - self._seen[0], scored - self._seen[1]
        self._seen = (failed, scored)
        if new_scored > 0:
            self._errored = new_failed >= new_scored
        self.failed, self.scored = self.failed + new_failed, self.scored + new_scored
        self.first_error = self.first_error or last_line(line.get("reward/first_error"))
        if self._errored:
            _extend(self.errored_spans, step)
        if line.get("reward/std") == 0 and "reward/mean" in line:
            value = float(line["reward/mean"])
            last = self.constant_spans[-1] if self.constant_spans else None
            if last and last[1] == step - 1 and last[2] == value:
                last[1] = step
            else:
                self.constant_spans.append([step, step, value])

    def all_errored(self) -> bool:
        """Every sample scored so far errored (and there was at least one)."""
        return self.scored > 0 and self.failed >= self.scored

    def warnings(self, current_step: int | None = None) -> list[str]:
        """In words; with `current_step`, only the warnings still true at that step."""
        why = f": {self.first_error}" if self.first_error else ""
        out = [f"every reward errored at {_steps(a, b)}{why}" for a, b in self.errored_spans
               if current_step is None or b == current_step]
        for a, b, value in self.constant_spans:
            n = b - a + 1
            if n < self.constant_steps or (current_step is not None and b != current_step):
                continue
            out.append(f"the reward was {value:g} for every sample at {_steps(a, b)} ({n} steps): "
                       f"nothing to learn from")
        return out

    def failure(self) -> str:
        """The message a run whose every reward errored ends with."""
        why = f"; the first error: {self.first_error}" if self.first_error else ""
        return (f"every reward errored ({self.failed} of {self.scored} samples scored), so nothing was "
                f"learned{why} (its traceback: the reward logs, logs/reward_*.log)")


def _extend(spans: list[list[int]], step: int) -> None:
    if spans and spans[-1][1] == step - 1:
        spans[-1][1] = step
    else:
        spans.append([step, step])
