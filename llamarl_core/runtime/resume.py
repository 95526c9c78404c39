"""`run.resume`: which checkpoint a run continues from, and the controller's part of it.

    llamarl train run.dir=D run.resume=auto        newest stable D/checkpoints/step_<N>
    llamarl train run.resume=D/checkpoints/step_N  that one (it must be stable)

Before any worker starts, the controller cuts metrics.jsonl and trained_examples.jsonl back
to step N (a crashed run may have logged steps it never checkpointed) and puts the saved
controller state in the store: per generator replica, the dropped-chunk count and the chunk
it starts at, so the credit rule (chunk n is trained at step n - dropped) still holds.
"""
from __future__ import annotations

import os

from llamarl_core.config.errors import ConfigError
from llamarl_core.config.schema import LlamaRLConfig
from llamarl_core.transport.control import ControlPlane

LOGS = ("metrics.jsonl", "trained_examples.jsonl", "trained_samples.jsonl")


def _checkpoints():
    """executors/checkpoints.py, imported when a resume needs it: it imports
    torch.distributed.checkpoint (and DTensor, sympy), seconds of CPU that the controller of
    a fresh run would spend for nothing."""
    from llamarl_core.executors import checkpoints

    return checkpoints


def run_dir_of(cfg: LlamaRLConfig) -> str | None:
    """The run directory a resume reuses: run.dir, else the one holding run.resume's path."""
    if cfg.run.dir:
        return os.path.abspath(cfg.run.dir)
    if cfg.run.resume and cfg.run.resume != "auto":
        return os.path.dirname(os.path.dirname(os.path.abspath(cfg.run.resume)))
    raise ConfigError("run.resume=auto needs run.dir=<the run directory to continue>")


def resolve(cfg: LlamaRLConfig, run_dir: str) -> str:
    """The stable checkpoint to load ('' when `auto` finds none)."""
    r, checkpoints = cfg.run, _checkpoints()
    if r.resume == "auto":
        path = checkpoints.latest_stable(run_dir) or ""
    else:
        path = os.path.abspath(r.resume)
        if not os.path.isdir(path):
            raise ConfigError(f"run.resume={r.resume}: no such checkpoint directory")
        if not checkpoints.is_stable(path):
            raise ConfigError(f"run.resume={r.resume}: no {checkpoints.STABLE} marker "
                              "(the checkpoint was not finished)")
    if path:
        step = read_state(path)["step"]
        if step >= r.max_steps:
            raise ConfigError(f"run.resume: {path} is at step {step}, run.max_steps={r.max_steps} "
                              "leaves nothing to train (raise run.max_steps)")
    return path


def read_state(path: str) -> dict:
    checkpoints = _checkpoints()
    try:
        return checkpoints.read_state(path)
    except checkpoints.UnsafeCheckpoint as e:
        raise ConfigError(f"run.resume: refusing checkpoint {path}: {e}") from None


def verify(path: str) -> None:
    """Read (safely) every file of `path` the trainer will read: a planted one is refused here,
    in the controller, before any role starts."""
    checkpoints = _checkpoints()
    try:
        checkpoints.verify(path)
    except checkpoints.UnsafeCheckpoint as e:
        raise ConfigError(f"run.resume: refusing checkpoint {path}: {e}") from None


def restore_controller_state(control: ControlPlane, run_dir: str, path: str) -> None:
    """Store keys and log files as they were at the checkpoint ('' = a fresh start)."""
    if not path and not any(os.path.exists(os.path.join(run_dir, name)) for name in LOGS):
        return  # a fresh start in a new directory: nothing to cut, nothing to restore
    checkpoints = _checkpoints()
    state = checkpoints.read_state(path) if path else {"step": 0, "next_chunk": {}, "dropped": {}}
    for name in LOGS:
        checkpoints.truncate_jsonl(os.path.join(run_dir, name), state["step"])
    for replica, chunk in state["next_chunk"].items():
        control.set_next_chunk(int(replica), chunk)
    for replica, n in state["dropped"].items():
        control.add_dropped(int(replica), n)
    if state.get("stale_dropped_groups"):  # cumulative metrics: they go on from the checkpoint's
        control.add_stale_groups(state["stale_dropped_groups"])
    if state.get("duplicate_dropped_groups"):
        control.add_duplicate_groups(state["duplicate_dropped_groups"])
