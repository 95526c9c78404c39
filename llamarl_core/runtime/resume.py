"""`run.resume`: which checkpoint a run continues from, and the controller's part of it.

    llamarl train run.dir=D run.resume=auto        newest stable D/checkpoints/step_<N>
    llamarl train run.resume=D/checkpoints/step_N  that one (it must be stable)

Before any worker starts, the controller cuts metrics.jsonl and trained_examples.jsonl back
to step N (a crashed run may have logged steps it never checkpointed) and puts the saved
controller state in the store: per generator replica, the dropped-chunk count and the chunk
it starts at, so the credit rule (chunk n is trained at step n - dropped) still holds.
"""
from __future__ import annotations

import json
import os

from llamarl_core.config.errors import ConfigError
from llamarl_core.config.schema import LlamaRLConfig
from llamarl_core.transport.control import ControlPlane

LOGS = ("metrics.jsonl", "trained_examples.jsonl", "trained_samples.jsonl")


def _checkpoints():
    """checkpoint/checkpoints.py, imported when a resume needs it: it imports
    torch.distributed.checkpoint (and DTensor, sympy), seconds of CPU that the controller of
    a fresh run would spend for nothing."""
    from llamarl_core.checkpoint import checkpoints

    return checkpoints


def run_dir_of(cfg: LlamaRLConfig) -> str | None:
    """The run directory a resume reuses: run.dir, else the one holding run.resume's path."""
    if cfg.run.dir:
        return os.path.abspath(cfg.run.dir)
    if cfg.run.resume and cfg.run.resume != "auto":
        return os.path.dirname(os.path.dirname(os.path.abspath(cfg.run.resume)))
    raise ConfigError("run.resume=auto needs run.dir=<the run directory to continue>")


def resolve(cfg: LlamaRLConfig, run_dir: str, log=print) -> str:
    """The stable, verified checkpoint to load ('' when `auto` finds none)."""
    r, checkpoints = cfg.run, _checkpoints()
    if r.resume == "auto":
        path = newest_valid(run_dir, log, refuse=True) or ""
    else:
        path = os.path.abspath(r.resume)
        if not os.path.isdir(path):
            raise ConfigError(f"run.resume={r.resume}: no such checkpoint directory")
        if not checkpoints.is_stable(path):
            raise ConfigError(f"run.resume={r.resume}: no {checkpoints.STABLE} marker "
                              "(the checkpoint was not finished)")
        verify(path)
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
    """Read (safely) every file of `path` the trainer will read, and check that every shard
    holds the bytes its metadata points at: a planted or truncated one is refused here, in the
    controller, before any role starts."""
    from llamarl_core.models.step_checkpoint import check_shard_sizes

    checkpoints = _checkpoints()
    try:
        check_shard_sizes(path)  # first: the plainest message (metadata read by the allow-list unpickler)
        checkpoints.verify(path)
    except (checkpoints.UnsafeCheckpoint, ValueError) as e:
        raise ConfigError(f"run.resume: refusing checkpoint {path}: {e}") from None


def newest_valid(run_dir: str, log=print, refuse: bool = False) -> str | None:
    """The newest stable checkpoint that passes `verify`; each newer one that fails is named
    (log=None: silently), so neither a resume nor the resume hint lands on a broken one.
    With `refuse`, stable checkpoints that all fail raise the newest one's error."""
    checkpoints = _checkpoints()
    stable = [path for _, path in checkpoints.step_dirs(run_dir) if checkpoints.is_stable(path)]
    first_error = None
    for path in reversed(stable):
        try:
            verify(path)
            return path
        except ConfigError as e:
            first_error = first_error or e
            if log:
                log(f"run.resume=auto: skipping {path}: {str(e).split(': ', 2)[-1]}")
    if refuse and first_error:
        raise first_error
    return None


def cut_jsonl(path: str, last_step: int, log=print) -> None:
    """Keep the lines with "step" <= last_step: a resumed run continues at last_step + 1.

    A run killed mid-write leaves a torn last line; it is dropped and said so. A bad line
    anywhere else is not a crash artefact: it is refused, naming the file and line."""
    if not os.path.exists(path):
        return
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    kept = []
    for i, raw in enumerate(lines):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
            step = row.get("step", 0) if isinstance(row, dict) else None
        except ValueError:
            step = None
        if step is None and not any(x.strip() for x in lines[i + 1:]):  # the last line
            log(f"resume: ignored a torn last line of {path} ({len(raw)} bytes)")
            continue
        if not isinstance(step, (int, float)):
            raise ConfigError(f"run.resume: {path}, line {i + 1} is not a JSON object with a numeric "
                              "'step' (edit or remove that line)")
        if step <= last_step:
            kept.append(raw + b"\n")
    with open(path, "wb") as f:
        f.writelines(kept)


def restore_controller_state(control: ControlPlane, run_dir: str, path: str, log=print) -> None:
    """Store keys and log files as they were at the checkpoint ('' = a fresh start)."""
    if not path and not any(os.path.exists(os.path.join(run_dir, name)) for name in LOGS):
        return  # a fresh start in a new directory: nothing to cut, nothing to restore
    checkpoints = _checkpoints()
    state = checkpoints.read_state(path) if path else {"step": 0, "next_chunk": {}, "extra": {}}
    for name in LOGS:
        cut_jsonl(os.path.join(run_dir, name), state["step"], log)
    for replica, chunk in state["next_chunk"].items():
        control.set_next_chunk(int(replica), chunk)
    # "dropped": the name of extra/<replica> in checkpoints written before #46
    for replica, n in state.get("extra", state.get("dropped", {})).items():
        control.add_extra(int(replica), n)
    if state.get("duplicate_dropped_groups"):  # a cumulative metric: it goes on from the checkpoint's
        control.add_duplicate_groups(state["duplicate_dropped_groups"])
