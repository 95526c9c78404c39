"""`llamarl bench sync-vs-async --simulate recipe=<a cpu recipe>`: predicted beside measured.

1. Run the measured bench (`run_sync_vs_async`: sync and async alternating), measuring this
   CPU's constants (bench/cpu_constants.py, ~5 s) before each run and after the last; each
   mode is priced with the median of the measurements around its runs. Or reuse the JSON of
   one (`measured=`) whose run directories still exist, with constants measured once, now.
2. Read the workload each mode generated from its runs: mean prompt length (the recipe's
   prompts, tokenized), mean and longest completion per chunk, and the share of rows the
   async trainer trained (`trainer/trained_rows_frac`: groups that all scored alike are
   skipped). These are inputs, not timings: every second in `predicted` comes from
   sim/cpu.py with the constants of step 1 and the fitted constants `CpuFitted`.
3. One JSON: `predicted` beside `measured` (median step seconds per mode), the relative error
   of each, `within_20_percent`, each fitted constant's sensitivity, and the whole measured
   result under `measured_bench`.
"""
from __future__ import annotations

import json
import os
import statistics
import time

from llamarl_core.bench.cpu_constants import measure_cpu_constants
from llamarl_core.bench.run_stats import read_jsonl
from llamarl_core.config.choices import DTYPE_BYTES
from llamarl_core.config.schema import LlamaRLConfig
from llamarl_core.config.streaming import is_sync
from llamarl_core.models.args import get_preset
from llamarl_core.sim.cpu import CpuFitted, CpuMeasured, CpuSystem, CpuWorkload, simulate_cpu
from llamarl_core.sim.sensitivity import sensitivity

TOLERANCE = 0.20
# Rows of the micro-batch the training rate is measured on: FLOP/s at 16 rows is within 2 % of
# 64's on tiny-2m, and a forward + backward of 16 takes ~0.1 s, so the best of ~10 runs is taken.
TRAIN_MEASURE_ROWS = 16


def cpu_system(cfg: LlamaRLConfig) -> CpuSystem:
    r = cfg.resources
    if cfg.model.checkpoint:
        raise ValueError("the CPU simulator reads sizes from model.preset; a checkpoint has its own")
    if r.generator.dtype != r.trainer.dtype or r.generator.tp != 1 or r.generator.quantization != "none":
        raise ValueError("the CPU simulator models one dtype on both roles, generator tp 1, no quantization")
    transport = cfg.controller.weight_transport
    return CpuSystem(model=get_preset(cfg.model.preset), max_batch_size=r.generator.max_batch_size,
                     micro_batch_size=r.trainer.micro_batch_size, batching=cfg.generation.batching,
                     sync_ranks=r.generator.num_devices + r.trainer.num_devices,
                     param_bytes=DTYPE_BYTES[r.trainer.dtype],
                     weight_transport="shm" if transport == "auto" else transport,
                     streaming=not is_sync(cfg.algorithm))


def mean_prompt_tokens(cfg: LlamaRLConfig) -> float:
    from llamarl_core.executors.setup import encode_prompts, load_split
    from llamarl_core.models.build import build_model

    _, tokenizer = build_model(cfg.model, "float32", seed=cfg.run.seed)
    prompts = encode_prompts(cfg.data, cfg.generation, load_split(cfg.data, "train"), tokenizer)
    return statistics.mean(len(p) for p in prompts.prompt_ids)


def workload(cfg: LlamaRLConfig, run_dirs: list[str], prompt_tokens: float) -> CpuWorkload:
    """What the runs of one mode generated and trained, per step (medians over steps)."""
    rows = [m for d in run_dirs for m in read_jsonl(os.path.join(d, "metrics.jsonl"))]
    mean = [m["generator/completion_tokens_mean"] for m in rows if "generator/completion_tokens_mean" in m]
    longest = [m["generator/completion_tokens_max"] for m in rows if "generator/completion_tokens_max" in m]
    trained = [m["trainer/trained_rows_frac"] for m in rows if "trainer/trained_rows_frac" in m]
    if not mean or not longest:
        raise ValueError(f"{run_dirs}: no generator/completion_tokens_* metrics to read the workload from")
    a = cfg.algorithm
    return CpuWorkload(rows=a.prompts_per_step * a.group_size, prompt_tokens=prompt_tokens,
                       new_tokens=statistics.median(mean), longest_new_tokens=statistics.median(longest),
                       async_trained_fraction=statistics.median(trained) if trained else 1.0)


def measure_for(cfg: LlamaRLConfig) -> dict:
    s = cpu_system(cfg)
    g, a = cfg.generation, cfg.algorithm
    per_replica = a.prompts_per_step * a.group_size // max(1, cfg.resources.generator.num_devices)
    return measure_cpu_constants(
        model_args=s.model, decode_rows=min(s.max_batch_size, per_replica),
        train_rows=min(s.micro_batch_size, TRAIN_MEASURE_ROWS), train_seq=g.max_prompt_tokens + g.max_new_tokens,
        weight_bytes=s.model.num_params() * s.param_bytes)


def compare(predicted: dict, measured: dict) -> dict:
    err = {m: predicted[m]["step_s"] / measured[m]["step_s"] - 1 for m in ("sync", "async")}
    return {"relative_error": err, "tolerance": TOLERANCE,
            "within_20_percent": all(abs(e) <= TOLERANCE for e in err.values())}


def measured_summary(result: dict) -> dict:
    """The measured side in the predicted side's names (median step seconds per mode)."""
    out = {}
    for m in ("sync", "async"):
        r = result[m]
        out[m] = {"step_s": r["step_s_median"], "step_s_min": r["step_s_min"], "step_s_max": r["step_s_max"],
                  "phase_s_per_step": r["phase_s_per_step"], "weight_sync_s": r["sync_s_per_step_median"]}
    out["speedup"] = result["speedup"]
    return out


def predict(system: CpuSystem, loads: dict, constants: dict, fitted: CpuFitted) -> dict:
    """Each mode predicted on the workload its own runs generated, with the constants measured
    around its runs (`constants[mode]`)."""
    sync = simulate_cpu(system, loads["sync"], constants["sync"], fitted)["sync"]
    asyn = simulate_cpu(system, loads["async"], constants["async"], fitted)["async"]
    return {"sync": sync, "async": asyn, "speedup": sync["step_s"] / asyn["step_s"],
            "workload": {m: w.to_dict() for m, w in loads.items()}}


def bracketing_constants(measurements: list[dict]) -> dict:
    """Per mode, the element-wise median of the constants measured right before and right after
    each of its runs (`measurements`: {"before": mode or None, ...constants} in run order), so
    a run is priced at the machine's speed around it (the host is shared; a neighbour's load
    moves the rates by 20 % or more between minutes)."""
    out = {}
    for mode in ("sync", "async"):
        near = [m for k, m in enumerate(measurements) if m["before"] == mode
                or (k > 0 and measurements[k - 1]["before"] == mode)]
        out[mode] = CpuMeasured(**{f: statistics.median(m[f] for m in near)
                                   for f in CpuMeasured.__dataclass_fields__})
    return out


def simulate_cpu_recipe(cfg: LlamaRLConfig, run_measured, measured_json: str | None = None,
                        fitted: CpuFitted = CpuFitted(), log=print) -> dict:
    """`run_measured(log=..., between_runs=...)` runs the measured bench (skipped when
    `measured_json` is given: then the constants are measured once, now)."""
    t0 = time.perf_counter()
    system = cpu_system(cfg)
    measurements: list[dict] = []

    def measure(before) -> None:
        log(f"measuring this CPU's constants (matmul, memcpy, gloo) before {before or 'the end'}")
        measurements.append({"before": before, **measure_for(cfg)})

    if measured_json:
        measure("sync")
        measurements.append({**measurements[0], "before": "async"})
        with open(measured_json) as f:
            result = json.load(f)
    else:
        result = run_measured(log=log, between_runs=measure)
    constants = bracketing_constants(measurements)
    prompt_tokens = mean_prompt_tokens(cfg)
    dirs = {m: [r["run_dir"] for r in result[m]["runs"]] for m in ("sync", "async")}
    loads = {m: workload(cfg, dirs[m], prompt_tokens) for m in ("sync", "async")}
    predicted = predict(system, loads, constants, fitted)
    measured = measured_summary(result)
    return {"benchmark": "sync_vs_async_simulated", "recipe": cfg.recipe,
            "measured_constants": {m: c.to_dict() for m, c in constants.items()},
            "constant_measurements": measurements, "fitted_constants": fitted.to_dict(),
            "weight_sync_s": predicted["async"]["weight_sync_s"],
            "predicted": predicted, "measured": measured, **compare(predicted, measured),
            "sensitivity": sensitivity(lambda f: predict(system, loads, constants, f), fitted,
                                       tuple(CpuFitted.__dataclass_fields__)),
            "measured_bench": result,  # the whole `llamarl bench sync-vs-async` result
            "measured_json": measured_json, "wall_s": time.perf_counter() - t0}


def fit_efficiencies(result: dict, base: CpuFitted = CpuFitted()) -> CpuFitted:
    """The two efficiencies that make the *sync* phases of one simulated-vs-measured
    JSON (`result` of `simulate_cpu_recipe`) come out exact; the other fitted constants kept.
    How `CpuFitted`'s defaults were set (on a calibration run, not on the committed one)."""
    from dataclasses import replace

    pred, meas = result["predicted"]["sync"], result["measured"]["sync"]["phase_s_per_step"]
    used = CpuFitted(**result["fitted_constants"])
    layer_steps = pred["decode_steps"] * pred["layers"]
    gen_compute_at_1 = (pred["generation_s"] - layer_steps * used.decode_layer_overhead_s) \
        * used.decode_matmul_efficiency
    train_at_1 = pred["training_s"] * used.train_step_efficiency
    # the measured train phase holds DDP's all-reduce, which the model prices on its own
    return replace(base, decode_matmul_efficiency=gen_compute_at_1 / (
        meas["generate"] - layer_steps * base.decode_layer_overhead_s),
        train_step_efficiency=train_at_1 / (meas["train"] - pred["allreduce_s"]))
