"""`llamarl bench quality`: does async AIPO learn as well as sync, per RL sample?

From one shared warm-start checkpoint (`sft/warmstart.py`), with the same number of RL
samples each (steps x prompts_per_step x group_size), six configurations:

    sync_k0            k = 0, colocated, always on-policy (ratios are 1)
    async_k1_aipo      k = 1, AIPO  min(pi/mu, rho)
    async_k4_aipo      k = 4, AIPO
    async_k4_none      k = 4, plain policy gradient on stale samples (no correction)
    async_k4_ppo_clip  k = 4, PPO-style ratio clipping
    streaming_k2       k = 2, AIPO: the setting at which the default job keeps the busier of
                       trainer and generator busy through every step

Every async configuration streams (executors/stream.py), the one async generator since #46.
Results committed before that generated the async_* configurations chunk by chunk and had a
`streaming` configuration (k = 1, AIPO): async_k1_aipo is that configuration now.

`seeds` seeds each (`run.seed`: prompt order, sampling, not the problems: `data.seed` keeps the
held-out set fixed). Runs go seed by seed, all the chosen configurations per seed, so machine noise
hits every configuration alike.

Why k = 4 is really 4 stale versions here: the admission rule (executors/admission.py) lets
the generator start chunk n once it holds version n - k, and at these shapes one chunk takes
the generator about half the time a step takes the trainer (one core each), so after the
first steps the generator waits at the admission limit and every chunk is trained exactly k versions after the weights
that sampled it. The realised staleness histogram in the result shows whether that held.
"""
from __future__ import annotations

import json
import os
import statistics
import time
from collections import Counter

from llamarl_core.bench.work_dir import default_work_dir
from llamarl_core.bench.run_stats import accuracy_curve, read_jsonl, read_timeline, rl_window
from llamarl_core.bench.provenance import machine
from llamarl_core.bench.sync_vs_async import freeze_recipe, run_one, shared_warmstart
from llamarl_core.config.load import DEFAULT_RECIPE, load_config
from llamarl_core.data.splits import eval_count

# name, k, correction (contract values) ; correction -> algorithm.name
CONFIGS = (("sync_k0", 0, "aipo"), ("async_k1_aipo", 1, "aipo"), ("async_k4_aipo", 4, "aipo"),
           ("async_k4_none", 4, "none"), ("async_k4_ppo_clip", 4, "ppo_clip"), ("streaming_k2", 2, "aipo"))
LOSS_NAME = {"aipo": "aipo", "none": "pg", "ppo_clip": "ppo"}
# Sized so 15 runs take about a quarter of an hour on 2 cores (11 min measured): half the
# recipe's prompts per step, evals every quarter of the run, no time cap. Overrides win.
BENCH_OVERRIDES = ("run.max_time_s=0", "run.checkpoint_every_steps=0", "algorithm.prompts_per_step=16")
DEFAULT_STEPS = 30


def select_configs(names: list[str] | None) -> tuple:
    """The CONFIGS rows named (in CONFIGS order), all of them for None; an unknown name is an error."""
    if names is None:
        return CONFIGS
    known = [name for name, _, _ in CONFIGS]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise ValueError(f"--configs: unknown configuration(s) {unknown or names}; choose from {', '.join(known)}")
    return tuple(row for row in CONFIGS if row[0] in names)


def config_overrides(k: int, correction: str, steps: int, seed: int, checkpoint: str, run_dir: str) -> list[str]:
    return [f"model.checkpoint={checkpoint}", "warmstart.steps=0", f"run.seed={seed}",
            f"algorithm.max_offpolicy_steps={k}", f"algorithm.name={LOSS_NAME[correction]}",
            f"run.max_steps={steps}", f"run.eval_every_steps={max(1, steps // 4)}", f"run.dir={run_dir}"]


def quality_run_stats(run_dir: str, samples_per_step: int) -> dict:
    """One run: final accuracy, curves over samples and wall time, off-policy diagnostics."""
    metrics = read_jsonl(os.path.join(run_dir, "metrics.jsonl"))
    summary = _json(run_dir)
    spans = read_timeline(run_dir)
    t0, _ = rl_window(spans)
    curve = [{**p, "samples": p["version"] * samples_per_step} for p in accuracy_curve(spans, summary, t0)]
    # one generator replica and one trainer rank: a step's batch is one chunk, one staleness
    staleness = Counter(str(round(m["trainer/staleness_mean"])) for m in metrics)
    mean = lambda key: statistics.mean(m[f"trainer/{key}"] for m in metrics)  # noqa: E731
    return {"run_dir": run_dir, "steps": len(metrics), "final_accuracy": summary["accuracy_after"],
            "accuracy_before": summary["accuracy_before"], "curve": curve,
            "rl_wall_s": summary["rl_wall_s"], "staleness_histogram": dict(staleness),
            "is_ratio_mean": mean("is_ratio_mean"),
            "is_ratio_max": max(m["trainer/is_ratio_max"] for m in metrics),
            "ess_fraction": mean("ess"), "truncated_fraction": mean("is_truncated_frac"),
            "ppo_clip_fraction": mean("ppo_clip_frac"),
            "reward_first": metrics[0]["reward/mean"], "reward_last": metrics[-1]["reward/mean"]}


def _json(run_dir: str) -> dict:
    with open(os.path.join(run_dir, "summary.json")) as f:
        return json.load(f)


def aggregate_config(name: str, k: int, correction: str, seeds: list[int], runs: list[dict]) -> dict:
    finals = [r["final_accuracy"] for r in runs]
    hist: Counter = Counter()
    for r in runs:
        hist.update(r["staleness_histogram"])
    return {"name": name, "max_offpolicy_steps": k, "correction": correction, "seeds": seeds,
            "final_accuracy": finals, "final_accuracy_mean": statistics.mean(finals),
            "final_accuracy_sd": statistics.stdev(finals) if len(finals) > 1 else 0.0,
            "staleness_histogram": dict(sorted(hist.items(), key=lambda kv: int(kv[0]))),
            "is_ratio_mean": statistics.mean(r["is_ratio_mean"] for r in runs),
            "is_ratio_max": max(r["is_ratio_max"] for r in runs),
            "ess_fraction": statistics.mean(r["ess_fraction"] for r in runs),
            "truncated_fraction": statistics.mean(r["truncated_fraction"] for r in runs),
            "ppo_clip_fraction": statistics.mean(r["ppo_clip_fraction"] for r in runs),
            "rl_wall_s": [r["rl_wall_s"] for r in runs], "runs": runs}


def run_quality(recipe: str | None = None, overrides: list[str] | None = None, seeds: int = 3,
                steps: int = DEFAULT_STEPS, work_dir: str | None = None, log=print, command: str | None = None,
                configs: list[str] | None = None) -> dict:
    if seeds < 1 or steps < 1:
        raise ValueError(f"--seeds ({seeds}) and --steps ({steps}) must be >= 1")
    chosen = select_configs(configs)
    recipe, overrides = recipe or DEFAULT_RECIPE, [*BENCH_OVERRIDES, *(overrides or [])]
    base = load_config(recipe, overrides)  # validates before anything runs
    work_dir = os.path.abspath(work_dir or default_work_dir("quality"))
    frozen = freeze_recipe(work_dir, recipe, overrides)
    t0 = time.perf_counter()
    warm = shared_warmstart(base, work_dir, log)
    if warm is None:
        if not base.model.checkpoint:
            raise ValueError("llamarl bench quality needs a warm start (warmstart.steps > 0) or model.checkpoint")
        warm = {"dir": base.model.checkpoint, "steps": 0, "seconds": 0.0}
    a = base.algorithm
    samples_per_step = a.prompts_per_step * a.group_size
    seed_list = [base.run.seed + i for i in range(seeds)]
    runs: dict = {name: [] for name, _, _ in chosen}
    for seed in seed_list:
        for name, k, correction in chosen:
            log(f"seed {seed}: {name}")
            run_dir = os.path.join(work_dir, f"{name}_seed{seed}")
            run_one(frozen, config_overrides(k, correction, steps, seed, warm["dir"], run_dir), log)
            runs[name].append(quality_run_stats(run_dir, samples_per_step))
    configs = [aggregate_config(name, k, c, seed_list, runs[name]) for name, k, c in chosen]
    before = sorted({r["accuracy_before"] for c in configs for r in c["runs"]})
    return {"benchmark": "quality", "command": command,
            "recipe": base.recipe, "overrides": overrides, "steps": steps,
            "samples_per_run": steps * samples_per_step, "samples_per_step": samples_per_step,
            "data_seed": base.data.seed, "num_eval_examples": eval_count(base.data),
            "warmstart": warm, "warmstart_accuracy": before[0] if len(before) == 1 else statistics.mean(before),
            "warmstart_accuracy_values": before, "machine": machine(),
            "wall_s": time.perf_counter() - t0, "work_dir": work_dir, "configs": configs}
