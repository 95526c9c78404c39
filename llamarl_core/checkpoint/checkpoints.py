"""Resumable checkpoints: everything a run needs to continue exactly where it stopped.

    checkpoints/step_<N>/            N = trainer steps done (= policy version = metrics step)
      trainer/                       model + optimizer through torch.distributed.checkpoint,
                                     one shard file per trainer rank (sharded as trained);
                                     a LoRA run's holds the adapters and their optimizer state
                                     only (the frozen base is model.checkpoint's, rebuilt on resume)
      rng/rank_<r>.json              torch and Python RNG states of trainer rank r (JSON)
      state.json                     step, policy_version, lr_steps (the LR schedule's position),
                                     next_chunk per generator replica (data position of the last
                                     TRAINED chunk + 1), extra chunks per replica (controller state;
                                     "dropped" before #46),
                                     held-out accuracy by version, and for a LoRA run
                                     "lora": {rank, alpha, dropout, target_modules}
      STABLE                         written last; a checkpoint without it is never loaded
      config.json, tokenizer         written first by the trainer (save_model_files): the step is
                                     a model too (models/step_checkpoint.py reads its shards)
    checkpoints/final/               Hugging Face export at the end of the run

Chunk n of replica i holds a fixed set of prompts (`chunk_prompt_indices`), so `next_chunk`
is the data position: a resumed generator starts there, and what was generated after the
checkpoint but not trained is generated again. The layout helpers are pure file operations;
`save`/`load` are collective over the trainer's group.

Nothing a resume reads can run code: state and RNG are JSON, the DCP shards go through
safe_dcp (restricted metadata unpickler, `weights_only=True` values), and `verify` reads
all of that in the controller before any role starts.
"""
from __future__ import annotations

import base64
import json
import os
import random
import re
import shutil

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict

from llamarl_core.checkpoint import safe_dcp
from llamarl_core.checkpoint.safe_dcp import UnsafeCheckpoint
from llamarl_core.models.lora import is_adapter, lora_settings

STABLE = "STABLE"
_STEP_DIR = re.compile(r"^step_(\d+)$")


# ---- layout (pure file operations) ------------------------------------------------------
def step_dirs(run_dir: str) -> list[tuple[int, str]]:
    """(N, path) of every checkpoints/step_<N> directory, oldest first, stable or not."""
    root = os.path.join(run_dir, "checkpoints")
    if not os.path.isdir(root):
        return []
    found = [(int(m.group(1)), os.path.join(root, name))
             for name in os.listdir(root) if (m := _STEP_DIR.match(name))]
    return sorted(found)


def is_stable(path: str) -> bool:
    return os.path.isfile(os.path.join(path, STABLE))


def read_state(path: str) -> dict:
    file = os.path.join(path, "state.json")
    try:
        with open(file) as f:
            state = json.load(f)
    except (OSError, ValueError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise UnsafeCheckpoint(f"{file} is not the JSON state llamarl writes ({e})") from None
    if not isinstance(state, dict) or not isinstance(state.get("step"), int):
        raise UnsafeCheckpoint(f"{file} has no integer 'step'")
    return state


# ---- RNG state as JSON ------------------------------------------------------------------
def rng_path(path: str, rank: int) -> str:
    return os.path.join(path, "rng", f"rank_{rank}.json")


def rng_to_json(torch_state: torch.Tensor, python_state: tuple) -> dict:
    version, internal, gauss = python_state
    return {"torch": base64.b64encode(torch_state.numpy().tobytes()).decode(),
            "python": {"version": version, "state": list(internal), "gauss_next": gauss}}


def rng_from_json(d, where: str) -> tuple[torch.Tensor, tuple]:
    """(torch RNG state, Python random state) from rng_to_json's dict, every value checked."""
    try:
        raw = base64.b64decode(d["torch"], validate=True)
        py = d["python"]
        internal, gauss = py["state"], py["gauss_next"]
        ok = (isinstance(py["version"], int) and isinstance(internal, list)
              and all(isinstance(x, int) and 0 <= x < 2**32 for x in internal)
              and (gauss is None or isinstance(gauss, float)))
    except (TypeError, KeyError, ValueError) as e:
        raise UnsafeCheckpoint(f"{where} is not an RNG state llamarl wrote ({type(e).__name__}: {e})") from None
    expected = torch.get_rng_state().numel()
    if not ok or len(raw) != expected:
        raise UnsafeCheckpoint(f"{where} is not an RNG state llamarl wrote (a torch state of "
                               f"{len(raw)} bytes, {expected} expected, or bad Python state)")
    state = torch.frombuffer(bytearray(raw), dtype=torch.uint8).clone()
    return state, (py["version"], tuple(internal), gauss)


def read_rng(file: str) -> tuple[torch.Tensor, tuple]:
    try:
        with open(file) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        raise UnsafeCheckpoint(f"{file} is not an RNG state llamarl wrote ({e})") from None
    return rng_from_json(d, file)


def verify(path: str) -> dict:
    """Read everything a resume from `path` reads except tensor data (tensors load with
    weights_only=True anyway): state.json, the DCP metadata and values, every RNG file.
    Returns state.json; raises UnsafeCheckpoint naming the file."""
    state = read_state(path)
    safe_dcp.verify(os.path.join(path, "trainer"))
    rng_dir = os.path.join(path, "rng")
    for name in sorted(os.listdir(rng_dir)) if os.path.isdir(rng_dir) else []:
        if not name.endswith(".json"):
            raise UnsafeCheckpoint(f"{os.path.join(rng_dir, name)}: unexpected file (RNG states are "
                                   f"rank_<r>.json; older .pt files are not loaded)")
        read_rng(os.path.join(rng_dir, name))
    return state


def prune(run_dir: str, keep: int) -> list[str]:
    """Delete all but the newest `keep` stable checkpoints, and unstable ones older than them."""
    dirs = step_dirs(run_dir)
    stable = [p for _, p in dirs if is_stable(p)]
    kept = set(stable[-keep:])
    newest = max((n for n, p in dirs if p in kept), default=-1)
    removed = [p for n, p in dirs if p not in kept and (is_stable(p) or n < newest)]
    for p in removed:
        shutil.rmtree(p, ignore_errors=True)
    return removed


# ---- save / load (collective over the trainer group) -----------------------------------
def _options(model) -> StateDictOptions:
    """Frozen parameters (a LoRA run's base) are left out: they never change during the run."""
    return StateDictOptions(ignore_frozen_params=True, strict=False) if _lora(model) else StateDictOptions()


def _lora(model) -> dict | None:
    return lora_settings(getattr(model, "module", model))


def _model_state(model, optimizer, options: StateDictOptions):
    """(model, optimizer) state dicts to save or fill; a LoRA run's model part is its adapters
    alone: `ignore_frozen_params` still yields a tied head (`output.weight`, torch 2.13: the tie's
    second name escapes the filter), which would put the whole embedding in every step."""
    msd, osd = get_state_dict(model, optimizer, options=options)
    if _lora(model) is not None:
        msd = {k: v for k, v in msd.items() if is_adapter(k)}
    return msd, osd


def save(path: str, model, optimizer, group, rank: int, state: dict, keep: int, run_dir: str) -> None:
    """Every trainer rank calls this; rank 0 writes state.json, then STABLE, then prunes."""
    msd, osd = _model_state(model, optimizer, _options(model))
    lora = _lora(model)
    if lora is not None:
        state = {**state, "lora": lora}
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=os.path.join(path, "trainer"),
             process_group=group)
    os.makedirs(os.path.join(path, "rng"), exist_ok=True)
    with open(rng_path(path, rank), "w") as f:
        json.dump(rng_to_json(torch.get_rng_state(), random.getstate()), f)
    if group is not None and dist.get_world_size(group) > 1:
        dist.barrier(group=group)  # every shard and RNG file is on disk before STABLE
    if rank != 0:
        return
    with open(os.path.join(path, "state.json"), "w") as f:
        json.dump(state, f, indent=2)
    with open(os.path.join(path, STABLE), "w") as f:
        f.write(f"{state['step']}\n")
    prune(run_dir, keep)


def load(path: str, model, optimizer, group, rank: int) -> dict:
    """Restore model, optimizer and this rank's RNG in place; returns state.json."""
    if not is_stable(path):
        raise FileNotFoundError(f"checkpoint {path} has no {STABLE} marker (interrupted write)")
    options = _options(model)
    msd, osd = _model_state(model, optimizer, options)
    state_dict = {"model": msd, "optim": osd}
    state = read_state(path)
    try:
        dcp.load(state_dict, storage_reader=safe_dcp.SafeReader(os.path.join(path, "trainer")),
                 planner=safe_dcp.SafePlanner(), process_group=group)
    except CheckpointException as e:  # a BaseException with every rank's traceback: name the cause
        causes = {str(getattr(f, "exception", f)).strip().splitlines()[-1] for f in e.failures.values()}
        raise ValueError(f"checkpoint {path} could not be loaded: {'; '.join(sorted(causes))}") from None
    set_state_dict(model, optimizer, model_state_dict=state_dict["model"],
                   optim_state_dict=state_dict["optim"], options=options)
    rng = rng_path(path, rank)
    if os.path.exists(rng):  # absent when resumed on more trainer ranks than saved
        torch_state, python_state = read_rng(rng)
        torch.set_rng_state(torch_state)
        random.setstate(python_state)
    return state
