"""Never train on a non-finite number (#44): the guard the learner consults every step.

A loss or gradient norm that is NaN or inf (a reward of 1e308 overflows its group's advantage)
would write NaN into every weight at the optimizer step, and from then on every checkpoint,
export and published version is NaN. The learner skips such an update instead (gradients
zeroed, no optimizer step, Adam's moments untouched) and tells this guard at the end of each
step whether it skipped one. `trainer/nonfinite_steps` is the running total of skipped steps
of this trainer process; after `trainer.max_nonfinite_steps` of them in a row the run stops
with `NonFiniteSteps`, raised out of the step before it is published, evaluated or
checkpointed: the weights on disk are those of the last finite step.
"""
from __future__ import annotations


class NonFiniteSteps(RuntimeError):
    """Too many non-finite steps in a row: the run stops (exit 1) without a checkpoint."""


class NonFiniteGuard:
    def __init__(self, max_in_row: int):
        self.max_in_row = max_in_row
        self.total = 0          # skipped steps so far (trainer/nonfinite_steps)
        self.in_row = 0         # skipped steps since the last finite one
        self.first_step = 0     # the first of those

    def end_step(self, step: int, skipped: bool) -> None:
        """Step `step` (1-based, the metrics' `step`) ended; raises on the limit's K-th in a row."""
        if not skipped:
            self.in_row = 0
            return
        self.total += 1
        self.in_row += 1
        if self.in_row == 1:
            self.first_step = step
        if self.in_row >= self.max_in_row:
            steps = f"step {step}" if self.first_step == step else f"steps {self.first_step}-{step}"
            raise NonFiniteSteps(
                f"trainer: loss or grad norm not finite for {self.in_row} steps in a row ({steps}; "
                f"trainer.max_nonfinite_steps={self.max_in_row}): stopped without a checkpoint "
                f"(non-finite rewards or advantages? see reward/errors and trainer/advantage_abs_mean)")
