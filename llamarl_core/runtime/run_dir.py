"""The run directory: chosen before planning (commands name its plan.json), never reused.

    no run.resume          run.dir (or runs/<recipe>); one that holds anything gets -2, -3…
    run.resume=auto        run.dir's newest stable checkpoint; a missing or empty run.dir
                           starts fresh (one line says so); one with files but no stable
                           checkpoint is refused (exit 2), never overwritten
    run.resume=PATH        that stable checkpoint, in its own run directory

The controller holds run_lock on the directory while the run lasts (runtime/controller.py).
"""
from __future__ import annotations

import json
import os
import secrets
import time

from omegaconf import OmegaConf

from llamarl_core.config.errors import ConfigError
from llamarl_core.config.env_texts import env_texts
from llamarl_core.config.schema import LlamaRLConfig
from llamarl_core.plan.plan import ControllerAddress, LaunchPlan, default_run_dir
from llamarl_core.runtime import resume, run_lock


def resolve_run_dir(cfg: LlamaRLConfig, log=print) -> str:
    """`run.dir` or runs/<recipe>; an existing non-empty directory gets a -2, -3… suffix.

    With `run.resume` the run's own directory is reused, and `run.resume` becomes the stable
    checkpoint to load ('' when `auto` finds a missing or empty directory).
    """
    if cfg.run.resume:
        path = resume.run_dir_of(cfg)
        check_writable(path)
        resolve_resume(cfg, path, log)
        return path
    base = os.path.abspath(default_run_dir(cfg))
    path, n = base, 1
    while os.path.isdir(path) and os.listdir(path):
        n += 1
        path = f"{base}-{n}"
    check_writable(path)
    return path  # created by the controller, once every check has passed


def check_writable(path: str) -> None:
    """Refuse (exit 2, before launch) a run directory that cannot be written: the directory,
    or its nearest existing parent, must take a file. A probe file rather than os.access: it
    does what the run will do, whoever runs it and whatever the mount."""
    where = os.path.abspath(path)
    while not os.path.isdir(where):
        parent = os.path.dirname(where)
        if parent == where:
            break
        where = parent
    probe = os.path.join(where, f".llamarl-write-probe-{os.getpid()}")
    try:
        os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        os.unlink(probe)
    except OSError as e:
        raise ConfigError(f"run.dir {path}: cannot write in {where}: {(e.strerror or str(e)).lower()} "
                          "(choose a writable run.dir)") from None


def resolve_resume(cfg: LlamaRLConfig, path: str, log=print) -> None:
    """Set cfg.run.resume to the checkpoint to load ('' = fresh), or refuse (ConfigError)."""
    run_lock.check_free(path)  # a live run's directory is not inspected, let alone reused
    if cfg.run.resume == "auto" and is_empty(path):
        log(f"run.resume=auto: {path} {'is empty' if os.path.isdir(path) else 'does not exist'}; "
            f"starting a fresh run there")
        cfg.run.resume = ""
        return
    found = resume.resolve(cfg, path, log)
    if not found:
        raise ConfigError(f"run.resume=auto: no checkpoint to resume in {path}; newest files: "
                          f"{newest_files(path)} (without run.resume a new run goes beside it)")
    cfg.run.resume = found


def is_empty(path: str) -> bool:
    """Missing, or nothing in it but the lock file and an empty logs/ (what a launch creates)."""
    if not os.path.isdir(path):
        return True
    rest = set(os.listdir(path)) - {run_lock.LOCK_FILE}
    logs = os.path.join(path, "logs")
    return not rest or (rest == {"logs"} and os.path.isdir(logs) and not os.listdir(logs))


def newest_files(path: str, n: int = 3) -> str:
    found = []
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            if name != run_lock.LOCK_FILE:
                found.append((os.path.getmtime(full), os.path.relpath(full, path)))
    found.sort(reverse=True)
    return ", ".join(f"{rel} ({time.strftime('%Y-%m-%d %H:%M', time.localtime(t))})"
                     for t, rel in found[:n]) or "none"


def write_run_files(run_dir: str, cfg: LlamaRLConfig, plan: LaunchPlan, host: str, port: int,
                    run_id: str | None = None) -> None:
    """`plan` with its run (directory, id, store address, config) as plan.json, and config.yaml. A
    fresh random run id unless one is given (a SLURM script fixes it for a requeued job)."""
    plan.run_dir, plan.run_id = run_dir, run_id or secrets.token_hex(4)
    plan.controller, plan.config = ControllerAddress(host, port), as_written(cfg)
    with open(os.path.join(run_dir, "plan.json"), "w") as f:
        json.dump(plan.to_json(), f, indent=2)
    with open(os.path.join(run_dir, "config.yaml"), "w") as f:
        f.write(OmegaConf.to_yaml(plan.config))


def as_written(cfg: LlamaRLConfig) -> dict:
    """The config for files: every `${oc.env:...}` field the run has not changed since loading
    back to its text (config/env_texts.py)."""
    container = OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)
    for key, (text, resolved) in env_texts(cfg).items():
        *parents, last = key.split(".")
        node = container
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node.get(part)
            if node is None:
                break
        if isinstance(node, list) and last.isdigit() and int(last) < len(node) and node[int(last)] == resolved:
            node[int(last)] = text
        elif isinstance(node, dict) and node.get(last, object()) == resolved:
            node[last] = text
    return container
