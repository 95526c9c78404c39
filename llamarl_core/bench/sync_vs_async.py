"""`llamarl bench sync-vs-async`: the same recipe run synchronously and asynchronously.

Design: one knob. Sync is `algorithm.max_offpolicy_steps=0` (generation, scoring and training
take turns on the colocated "actor" ranks); async is the recipe's k (at least 1: generator,
reward and trainer as separate role groups, overlapping). Same seed, same steps, same samples
per step. Runs alternate sync, async, sync, async... so machine noise (this machine is shared)
hits both modes alike; per-step times are pooled across repeats.

Both modes start RL from one shared warm-start checkpoint (made once, in this process, by
`sft/warmstart.py`), so their accuracy curves start from the same model: each mode
warm-starting on its own would train on different numbers of ranks and start apart.

Reported per mode: RL step time (median, min, max), each role's busy/idle fraction of the RL
window, weight-sync seconds per step, generated tokens/s, reward and held-out accuracy against
wall time, time to a target accuracy. Then

    speedup       = sync step_s median / async step_s median
    ideal_speedup = (generate + score + train seconds per step, measured in the sync runs)
                    / (slowest of them per step, measured in the async runs)

i.e. what perfect overlap with free weight sync would give on the devices each mode really
had; `speedup / ideal_speedup` is the fraction of that the runtime achieved.
"""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict

from llamarl_core.bench.provenance import machine
from llamarl_core.bench.run_stats import PHASES, run_stats
from llamarl_core.bench.work_dir import default_work_dir
from omegaconf import OmegaConf

from llamarl_core.config.load import DEFAULT_RECIPE, compose_config, load_config
from llamarl_core.executors.pipeline import learner_config
from llamarl_core.executors.setup import encode_prompts, load_split
from llamarl_core.models import save_pretrained
from llamarl_core.models.build import build_model
from llamarl_core.plan.plan import make_plan
from llamarl_core.runtime.controller import Controller
from llamarl_core.runtime.run_dir import resolve_run_dir
from llamarl_core.sft.warmstart import warmstart_sequences, warmstart_steps

MODES = ("sync", "async")


class BenchRunFailed(RuntimeError):
    pass


def mode_overrides(mode: str, async_k: int, steps: int, run_dir: str,
                   checkpoint: str | None = None) -> list[str]:
    k = 0 if mode == "sync" else async_k
    start = [f"model.checkpoint={checkpoint}", "warmstart.steps=0"] if checkpoint else []
    return [*start, f"algorithm.max_offpolicy_steps={k}", f"run.max_steps={steps}", f"run.dir={run_dir}"]


def freeze_recipe(work_dir: str, recipe: str, overrides: list[str]) -> str:
    """Write the resolved config once (`work_dir/recipe_frozen.yaml`) and return its path: every
    run loads that copy, so a recipe edited while the bench runs (minutes) cannot give the modes
    or repeats different settings."""
    os.makedirs(work_dir, exist_ok=True)
    frozen = os.path.join(os.path.abspath(work_dir), "recipe_frozen.yaml")
    with open(frozen, "w") as f:
        f.write(OmegaConf.to_yaml(compose_config(recipe, overrides)))
    return frozen
def run_warmstart(cfg, out_dir: str, log=print) -> dict:
    """One process: build the model as the trainer does, warm start it (sft/warmstart.py, the
    same batches as a 1-rank trainer), save it to `out_dir` (HF format). Returns {"dir",
    "steps", "loss", "seconds"}."""
    if cfg.warmstart.steps < 1:
        raise ValueError(f"warmstart.steps={cfg.warmstart.steps}: nothing to warm start")
    t0 = time.perf_counter()
    model, tokenizer = build_model(cfg.model, dtype=cfg.resources.trainer.dtype, seed=cfg.run.seed)
    prompts = encode_prompts(cfg.data, cfg.generation, load_split(cfg.data, "train"), tokenizer)
    seqs, _ = warmstart_sequences(cfg.warmstart, cfg.data, cfg.generation, prompts, tokenizer)
    loss = warmstart_steps(model, cfg.warmstart, cfg.run.seed, seqs, tokenizer.pad_id, log=lambda m: log(m),
                           adam=learner_config(cfg))
    save_pretrained(model, tokenizer, out_dir)
    return {"dir": os.path.abspath(out_dir), "steps": cfg.warmstart.steps, "loss": loss,
            "seconds": time.perf_counter() - t0}


def shared_warmstart(cfg, work_dir: str, log=print) -> dict | None:
    """The warm start every run of a bench starts RL from (None: the recipe has none)."""
    if cfg.warmstart.steps == 0:
        return None
    log(f"shared warm start ({cfg.warmstart.steps} steps) -> {work_dir}/warmstart")
    return run_warmstart(cfg, os.path.join(work_dir, "warmstart"), log=log)


def run_one(recipe: str, overrides: list[str], log=print) -> str:
    cfg = load_config(recipe, overrides)
    run_dir = resolve_run_dir(cfg)
    plan = make_plan(cfg, run_dir=run_dir)
    t0 = time.perf_counter()
    result = Controller(cfg, plan, run_dir, view=None).run()
    if not result.ok:
        role, rank = result.failed or (None, None)
        raise BenchRunFailed(f"{plan.mode} run failed ({role} rank {rank}): {result.message}\n"
                             f"{result.log_tail or ''}\nlogs: {os.path.join(run_dir, 'logs')}")
    log(f"  {plan.mode} run done in {time.perf_counter() - t0:.1f} s: {run_dir}")
    return run_dir


def aggregate_mode(runs: list[dict]) -> dict:
    """Pool the runs of one mode: step times together, fractions and rates as medians."""
    steps = [s for r in runs for s in r["step_s"]]
    roles = sorted({role for r in runs for role in r["roles"]})
    busy = {role: statistics.median(r["roles"][role]["busy_fraction"] for r in runs if role in r["roles"])
            for role in roles}
    idle = {role: statistics.median(r["roles"][role]["idle_fraction"] for r in runs if role in r["roles"])
            for role in roles}
    phases = {p: statistics.median(r["phase_s_per_step"][p] for r in runs) for p in PHASES}
    ttt = [r["time_to_target_s"] for r in runs]
    reached = [t for t in ttt if t is not None]
    return {
        "step_s_median": statistics.median(steps), "step_s_min": min(steps), "step_s_max": max(steps),
        "step_s": steps, "role_busy_fraction": busy, "role_idle_fraction": idle,
        "phase_s_per_step": phases,
        "sync_s_per_step_median": statistics.median(r["sync_s_per_step"] for r in runs),
        "tokens_per_s_median": statistics.median(r["tokens_per_s"] for r in runs),
        "rl_wall_s": [r["rl_wall_s"] for r in runs],
        "accuracy_before": [r["accuracy_before"] for r in runs],
        "accuracy_after": [r["accuracy_after"] for r in runs],
        "time_to_target_s": ttt,
        "time_to_target_s_median": statistics.median(reached) if len(reached) == len(ttt) else None,
        "runs": runs,
    }


def compare(sync: dict, asyn: dict) -> dict:
    speedup = sync["step_s_median"] / asyn["step_s_median"]
    sync_sum = sum(sync["phase_s_per_step"].values())
    slowest = max(asyn["phase_s_per_step"].values())
    ideal = sync_sum / slowest if slowest > 0 else None
    return {"speedup": speedup, "ideal_speedup": ideal,
            "speedup_over_ideal": speedup / ideal if ideal else None,
            "ideal_detail": {"sync_phase_sum_s": sync_sum,
                             "async_slowest_phase_s": slowest,
                             "async_slowest_phase": max(asyn["phase_s_per_step"],
                                                        key=asyn["phase_s_per_step"].get)}}


def run_sync_vs_async(recipe: str | None = None, overrides: list[str] | None = None, steps: int = 8,
                      repeats: int = 2, target_accuracy: float = 0.5, work_dir: str | None = None,
                      log=print, command: str | None = None, between_runs=None) -> dict:
    """Alternate sync and async runs of `recipe`; return the JSON-able result.
    `between_runs(next_mode)` is called before each run and once after the last (`None`):
    the CPU simulator measures the machine's constants there (bench/sim_cpu.py)."""
    if steps < 1 or repeats < 1:
        raise ValueError(f"--steps ({steps}) and --repeats ({repeats}) must be >= 1")
    recipe, overrides = recipe or DEFAULT_RECIPE, list(overrides or [])
    base = load_config(recipe, overrides)  # validates the recipe before anything runs
    async_k = max(1, base.algorithm.max_offpolicy_steps)
    work_dir = work_dir or default_work_dir("sync_vs_async")
    frozen = freeze_recipe(work_dir, recipe, overrides)
    t0 = time.perf_counter()
    warm = shared_warmstart(base, work_dir, log)
    per_mode: dict = {m: [] for m in MODES}
    for i in range(repeats):
        for mode in MODES:
            log(f"repeat {i + 1}/{repeats}: {mode}")
            if between_runs:
                between_runs(mode)
            run_dir = os.path.join(work_dir, f"{mode}_{i}")
            run_one(frozen, mode_overrides(mode, async_k, steps, run_dir, warm and warm["dir"]), log)
            per_mode[mode].append(run_stats(run_dir, target_accuracy))
    if between_runs:
        between_runs(None)
    sync, asyn = aggregate_mode(per_mode["sync"]), aggregate_mode(per_mode["async"])
    return {"benchmark": "sync_vs_async", "command": command,
            "recipe": base.recipe, "overrides": overrides, "steps": steps, "repeats": repeats,
            "async_max_offpolicy_steps": async_k, "seed": base.run.seed,
            "target_accuracy": target_accuracy, "config": asdict(base), "machine": machine(),
            "wall_s": time.perf_counter() - t0, "work_dir": work_dir, "frozen_recipe": frozen,
            "warmstart": warm,
            "sync": sync, "async": asyn, **compare(sync, asyn)}
