"""The run directory: chosen before planning (commands name its plan.json), never reused."""
from __future__ import annotations

import json
import os
import secrets

from omegaconf import OmegaConf

from llamarl_core.config.schema import LlamaRLConfig
from llamarl_core.plan.plan import default_run_dir
from llamarl_core.runtime import resume


def resolve_run_dir(cfg: LlamaRLConfig) -> str:
    """`run.dir` or runs/<recipe>; an existing non-empty directory gets a -2, -3… suffix.

    With `run.resume` the run's own directory is reused, and `run.resume` becomes the stable
    checkpoint to load ('' when `auto` finds none).
    """
    if cfg.run.resume:
        path = resume.run_dir_of(cfg)
        os.makedirs(os.path.join(path, "logs"), exist_ok=True)
        cfg.run.resume = resume.resolve(cfg, path)
        return path
    base = os.path.abspath(default_run_dir(cfg))
    path, n = base, 1
    while os.path.isdir(path) and os.listdir(path):
        n += 1
        path = f"{base}-{n}"
    os.makedirs(os.path.join(path, "logs"), exist_ok=True)
    return path


def write_run_files(run_dir: str, cfg: LlamaRLConfig, plan_dict: dict, host: str, port: int,
                    run_id: str | None = None) -> dict:
    """plan.json (what the workers read: plan + config + store address + run id) and config.yaml.
    A fresh random run id unless one is given (a SLURM script fixes it for a requeued job)."""
    container = OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)
    full = {**plan_dict, "run_dir": run_dir, "run_id": run_id or secrets.token_hex(4),
            "controller": {"host": host, "port": port}, "config": container}
    with open(os.path.join(run_dir, "plan.json"), "w") as f:
        json.dump(full, f, indent=2)
    with open(os.path.join(run_dir, "config.yaml"), "w") as f:
        f.write(OmegaConf.to_yaml(container))
    return full
