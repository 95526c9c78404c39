"""TensorBoard event files for a run: `<run_dir>/tb/`, written by the trainer's rank 0.

Every numeric value of a `metrics.jsonl` line becomes a scalar at that line's `step`, under a
tag grouped by prefix (`reward/`, `eval/`, `trainer/`, `generator/`, `sync/`, `time/`, ...):
keys that already carry a `role/` prefix keep it, the few top-level ones are filed under a
group (`wall_s` → `time/wall_s`). The importance ratio and the staleness go in as
histograms, the resolved config as text. A resumed run passes `purge_step` so events a crash
left after its last checkpoint are discarded and the step axis continues without overlap.

`tensorboard` is an optional package: without it the run goes on and says so once.
"""
from __future__ import annotations

import os
import sys

import torch

TOP_LEVEL_GROUPS = {"wall_s": "time", "policy_version": "trainer"}  # a line's axes; the rest is role/quantity


def tensorboard_tag(key: str) -> str:
    """The TensorBoard tag of a metrics.jsonl key (`trainer/loss` stays, `wall_s` → `time/wall_s`)."""
    if "/" in key:
        return key
    return f"{TOP_LEVEL_GROUPS.get(key, 'run')}/{key}"


def scalar_items(line: dict):
    """(tag, value) for every numeric metric of a metrics.jsonl line except the step itself."""
    for key, value in line.items():
        if key == "step" or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        yield tensorboard_tag(key), float(value)


class TensorBoardLog:
    def __init__(self, run_dir: str, config_yaml: str | None = None, purge_step: int | None = None):
        from torch.utils.tensorboard import SummaryWriter  # needs the `tensorboard` package
        self.path = os.path.join(run_dir, "tb")
        self.writer = SummaryWriter(self.path, purge_step=purge_step, flush_secs=10)
        if config_yaml and not purge_step:
            self.writer.add_text("config", "```yaml\n" + config_yaml + "\n```", 0)

    @classmethod
    def open(cls, run_dir: str, enabled: bool, purge_step: int | None = None) -> "TensorBoardLog | None":
        """The run's writer, or None when turned off or when `tensorboard` is not installed."""
        if not enabled:
            return None
        config_path = os.path.join(run_dir, "config.yaml")
        config_yaml = open(config_path).read() if os.path.exists(config_path) else None
        try:
            return cls(run_dir, config_yaml, purge_step)
        except ImportError:
            print("tensorboard: not installed, no event files (pip install tensorboard, "
                  "or set logging.tensorboard=false)", file=sys.stderr, flush=True)
            return None

    def write(self, line: dict, histograms: dict[str, torch.Tensor] | None = None) -> None:
        step = int(line["step"])
        for tag, value in scalar_items(line):
            self.writer.add_scalar(tag, value, step)
        for tag, values in (histograms or {}).items():
            values = values.detach().float().cpu()
            values = values[torch.isfinite(values)]  # all NaN: "The histogram is empty" (ValueError)
            if values.numel():
                self.writer.add_histogram(tag, values, step)

    def close(self) -> None:
        self.writer.close()
