"""Resumable checkpoints: everything a run needs to continue exactly where it stopped.

    checkpoints/step_<N>/            N = trainer steps done (= policy version = metrics step)
      trainer/                       model + optimizer through torch.distributed.checkpoint,
                                     one shard file per trainer rank (sharded as trained)
      rng/rank_<r>.pt                torch and Python RNG states of trainer rank r
      state.json                     step, policy_version, lr_steps (the LR schedule's position),
                                     next_chunk per generator replica (data position of the last
                                     TRAINED chunk + 1), dropped per replica (controller state),
                                     held-out accuracy by version
      STABLE                         written last; a checkpoint without it is never loaded
      config.json, tokenizer         written first by the trainer (save_model_files): the step is
                                     a model too (models/step_checkpoint.py reads its shards)
    checkpoints/final/               Hugging Face export at the end of the run

Chunk n of replica i holds a fixed set of prompts (`chunk_prompt_indices`), so `next_chunk`
is the data position: a resumed generator starts there, and what was generated after the
checkpoint but not trained is generated again. The layout helpers are pure file operations;
`save`/`load` are collective over the trainer's group.
"""
from __future__ import annotations

import json
import os
import random
import re
import shutil

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

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


def latest_stable(run_dir: str) -> str | None:
    """The newest checkpoint with its STABLE marker (an interrupted write has none)."""
    stable = [path for _, path in step_dirs(run_dir) if is_stable(path)]
    return stable[-1] if stable else None


def read_state(path: str) -> dict:
    with open(os.path.join(path, "state.json")) as f:
        return json.load(f)


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


def truncate_jsonl(path: str, last_step: int) -> None:
    """Keep the lines with "step" <= last_step: a resumed run continues at last_step + 1."""
    if not os.path.exists(path):
        return
    with open(path) as f:
        lines = [line for line in f if line.strip() and json.loads(line).get("step", 0) <= last_step]
    with open(path, "w") as f:
        f.writelines(lines)


# ---- save / load (collective over the trainer group) -----------------------------------
def save(path: str, model, optimizer, group, rank: int, state: dict, keep: int, run_dir: str) -> None:
    """Every trainer rank calls this; rank 0 writes state.json, then STABLE, then prunes."""
    msd, osd = get_state_dict(model, optimizer)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=os.path.join(path, "trainer"),
             process_group=group)
    os.makedirs(os.path.join(path, "rng"), exist_ok=True)
    torch.save({"torch": torch.get_rng_state(), "python": random.getstate()},
               os.path.join(path, "rng", f"rank_{rank}.pt"))
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
    msd, osd = get_state_dict(model, optimizer)
    state_dict = {"model": msd, "optim": osd}
    dcp.load(state_dict, checkpoint_id=os.path.join(path, "trainer"), process_group=group)
    set_state_dict(model, optimizer, model_state_dict=state_dict["model"],
                   optim_state_dict=state_dict["optim"])
    rng_path = os.path.join(path, "rng", f"rank_{rank}.pt")
    if os.path.exists(rng_path):  # absent when resumed on more trainer ranks than saved
        rng = torch.load(rng_path, weights_only=False)
        torch.set_rng_state(rng["torch"])
        random.setstate(rng["python"])
    return read_state(path)
