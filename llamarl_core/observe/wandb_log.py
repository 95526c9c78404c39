"""Weights & Biases for a run (`logging.wandb=true`), written by the trainer's rank 0.

The same scalars TensorBoard gets (`tensorboard_log.scalar_items`: every numeric value of a
metrics.jsonl line, under the same tags) at the same `step`, the same two histograms, and the
resolved config (config.yaml) as the W&B run's config. Files go under `<run_dir>/wandb/`.

Online (the default) needs `wandb login` or WANDB_API_KEY on the trainer's host.
`WANDB_MODE=offline` (or `disabled`) is read by wandb itself, so a run on a machine without
network writes `<run_dir>/wandb/offline-run-*/run-*.wandb`, which `wandb sync` uploads later.
wandb is an optional package (extra `wandb`): asked for and not installed, `llamarl train`
exits 2 before launch (`plan/validate.py: validate_logging`). A resumed run is a new W&B run
(`<name>-resume-<step>`); W&B refuses steps below ones it already holds.
"""
from __future__ import annotations

import os

import torch

from llamarl_core.config.schema import LoggingConfig
from llamarl_core.observe.tensorboard_log import scalar_items


class WandbLog:
    def __init__(self, run_dir: str, logging: LoggingConfig, first_step: int = 1):
        import wandb
        from omegaconf import OmegaConf

        self.wandb = wandb
        config_path = os.path.join(run_dir, "config.yaml")
        config = OmegaConf.to_container(OmegaConf.load(config_path)) if os.path.exists(config_path) else {}
        name = logging.wandb_run_name or os.path.basename(os.path.abspath(run_dir))
        if first_step > 1:
            name = f"{name}-resume-{first_step - 1}"
        self.run = wandb.init(project=logging.wandb_project, name=name, dir=run_dir, config=config,
                              settings=wandb.Settings(silent=True, console="off", x_disable_stats=True))

    @classmethod
    def open(cls, run_dir: str, logging: LoggingConfig, first_step: int = 1) -> "WandbLog | None":
        return cls(run_dir, logging, first_step) if logging.wandb else None

    def write(self, line: dict, histograms: dict[str, torch.Tensor] | None = None) -> None:
        values: dict = dict(scalar_items(line))
        for tag, tensor in (histograms or {}).items():
            if tensor.numel():  # float64: float32 ratios a few ulps around 1 are too close for 64 bins
                values[tag] = self.wandb.Histogram(tensor.detach().double().cpu().numpy())
        self.run.log(values, step=int(line["step"]))

    def close(self) -> None:
        self.run.finish()
        self.wandb.teardown()  # the wandb service process ends with the run, not with Python
