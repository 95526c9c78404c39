"""Tables for `llamarl bench`: the measured sync-vs-async result and the simulator's prediction
for a recipe beside the paper's published step times."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table

from llamarl_core.sim.adapter import simulate_config
from llamarl_core.sim.cases import PUBLISHED_STEP_S, calibrate, format_table
from llamarl_core.config.errors import ConfigError
from llamarl_core.config.schema import LlamaRLConfig

# Which published case a model preset is compared with.
PRESET_TO_CASE = {"llama3-8b": "8b", "llama3-70b": "70b", "llama3.1-405b": "405b"}


def _f(x, fmt="{:.2f}"):
    return "—" if x is None else fmt.format(x)


def quality_table(result: dict) -> Table:
    t = Table(title=f"quality, {result['recipe']}: {result['samples_per_run']} RL samples per run from "
                    f"one warm start (held-out {result['warmstart_accuracy']:.3f})")
    for col in ("config", "k", "correction", "final acc mean ± sd", "per seed", "staleness",
                "IS mean / max", "ESS", "truncated"):
        t.add_column(col, justify="left" if col in ("config", "correction", "staleness") else "right")
    for c in result["configs"]:
        t.add_row(c["name"], str(c["max_offpolicy_steps"]), c["correction"],
                  f"{c['final_accuracy_mean']:.3f} ± {c['final_accuracy_sd']:.3f}",
                  " ".join(f"{x:.3f}" for x in c["final_accuracy"]),
                  " ".join(f"{k}:{v}" for k, v in c["staleness_histogram"].items()),
                  f"{c['is_ratio_mean']:.3f} / {c['is_ratio_max']:.2f}", f"{c['ess_fraction']:.3f}",
                  f"{c['truncated_fraction']:.4f}")
    return t


def sync_vs_async_table(result: dict) -> Table:
    s, a = result["sync"], result["async"]
    t = Table(title=f"sync vs async, {result['recipe']}: {result['steps']} RL steps x "
                    f"{result['repeats']} repeats each, alternating (seconds)")
    t.add_column("")
    t.add_column("sync (k=0, colocated)", justify="right")
    t.add_column(f"async (k={result['async_max_offpolicy_steps']})", justify="right")
    t.add_row("step s median [min, max]",
              *(f"{m['step_s_median']:.2f} [{m['step_s_min']:.2f}, {m['step_s_max']:.2f}]" for m in (s, a)))
    for phase in ("generate", "score", "train"):
        t.add_row(f"{phase} s/step (per rank)", *(f"{m['phase_s_per_step'][phase]:.3f}" for m in (s, a)))
    roles = sorted(set(s["role_busy_fraction"]) | set(a["role_busy_fraction"]))
    for role in roles:
        t.add_row(f"{role} busy / idle",
                  *(f"{m['role_busy_fraction'][role]:.0%} / {m['role_idle_fraction'][role]:.0%}"
                    if role in m["role_busy_fraction"] else "—" for m in (s, a)))
    t.add_row("weight sync s/step", *(f"{m['sync_s_per_step_median']:.4f}" for m in (s, a)))
    t.add_row("generated tokens/s", *(f"{m['tokens_per_s_median']:.0f}" for m in (s, a)))
    t.add_row("accuracy after", *(", ".join(_f(x, "{:.3f}") for x in m["accuracy_after"]) for m in (s, a)))
    t.add_row(f"s to accuracy >= {result['target_accuracy']:g}",
              *(", ".join(_f(x, "{:.0f}") for x in m["time_to_target_s"]) for m in (s, a)))
    t.caption = (f"speedup {result['speedup']:.2f}x; ideal {_f(result['ideal_speedup'])}x "
                 f"(sync phase sum / slowest async phase); achieved "
                 f"{_f(result['speedup_over_ideal'], '{:.0%}')} of ideal")
    return t


def simulate_recipe(cfg: LlamaRLConfig | None, console: Console | None = None) -> dict:
    """Calibration table, then (given a GPU recipe) its predicted step times; JSON-able."""
    from llamarl_core.config.hardware import get_device
    from llamarl_core.plan.model_source import resolve_model_args

    console = console or Console()
    rows = calibrate()
    console.print(format_table(rows))
    out: dict = {"benchmark": "simulator", "calibration": rows}
    if cfg is None:
        return out
    if cfg.resources.device == "cpu":
        raise ConfigError(f"recipe {cfg.recipe}: --simulate predicts GPU clusters; "
                          f"resources.device=cpu (try recipe=8b_gsm8k, 70b_gsm8k or 405b_math)")
    model, preset = resolve_model_args(cfg.model)
    result = simulate_config(cfg, model, get_device(cfg.resources.device))
    if result.get("error"):
        raise ConfigError(f"recipe {cfg.recipe}: the simulator cannot model it: {result['error']}")
    case = PRESET_TO_CASE.get(preset)
    published = PUBLISHED_STEP_S.get(case) if case else None
    t = Table(title=f"recipe {cfg.recipe}: predicted step time from its sizes (seconds)")
    for col in ("", "GPUs", "sync", "async", "speedup", "ideal speedup"):
        t.add_column(col, justify="right")
    t.add_row("predicted", str(result["async"]["devices"]), f"{result['sync']['step_s']:.2f}",
              f"{result['async']['step_s']:.2f}", f"{result['speedup']:.2f}x",
              f"{result['ideal_speedup']:.2f}x")
    if published:
        t.add_row(f"paper ({case})", str(published["devices"]), f"{published['sync']:.2f}",
                  f"{published['async']:.2f}", f"{published['sync'] / published['async']:.2f}x", "")
    console.print(t)
    return {**out, **result, "recipe": cfg.recipe, "model_preset": preset,
            "weight_sync_s": result["async"]["weight_sync_s"],
            "sensitivity": recipe_sensitivity(cfg, model, get_device(cfg.resources.device)),
            "published": {"case": case, **published} if published else None}


def recipe_sensitivity(cfg: LlamaRLConfig, model, spec) -> dict:
    """Each fitted SimConstants field at x0.8 and x1.2, alone (docs/SIMULATOR.md quotes these)."""
    from llamarl_core.sim.adapter import sim_inputs_from_config
    from llamarl_core.sim.constants import DEFAULT_CONSTANTS, FITTED
    from llamarl_core.sim.sensitivity import sensitivity
    from llamarl_core.sim.simulator import simulate

    return sensitivity(lambda c: simulate(sim_inputs_from_config(cfg, model, spec, c), c),
                       DEFAULT_CONSTANTS, FITTED)


def predicted_vs_measured_table(result: dict) -> Table:
    """The CPU simulator's step times beside the measured bench's (sim/cpu.py, bench/sim_cpu.py)."""
    p, m = result["predicted"], result["measured"]
    t = Table(title=f"simulator vs measured, {result['recipe']} on this CPU (seconds per RL step)")
    for col in ("mode", "predicted", "measured (median)", "error", "pred gen", "meas gen", "pred train",
                "meas train", "pred weight sync"):
        t.add_column(col, justify="right")
    for mode in ("sync", "async"):
        ph = m[mode]["phase_s_per_step"]
        t.add_row(mode, f"{p[mode]['step_s']:.3f}", f"{m[mode]['step_s']:.3f}",
                  f"{result['relative_error'][mode]:+.0%}", f"{p[mode]['generation_s']:.3f}",
                  f"{ph['generate']:.3f}", f"{p[mode]['training_s']:.3f}", f"{ph['train']:.3f}",
                  f"{p[mode]['weight_sync_s']:.4f}")
    c = result["measured_constants"]["async"]
    t.caption = (f"speedup predicted {p['speedup']:.2f}x, measured {m['speedup']:.2f}x; within ±20 %: "
                 f"{'yes' if result['within_20_percent'] else 'NO'}. Constants around the async runs: "
                 f"{c['decode_beside_train_flops_per_s'] / 1e9:.0f} / {c['train_beside_decode_flops_per_s'] / 1e9:.0f} "
                 f"GFLOP/s per thread beside each other (decode-shape matmul / a micro-batch's forward + "
                 f"backward), memcpy {c['memcpy_bytes_per_s'] / 1e9:.1f} GB/s, gloo "
                 f"{c['gloo_bytes_per_s'] / 1e9:.1f} GB/s")
    return t
