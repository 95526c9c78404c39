"""`llamarl bench losses`: the loss options of issue #49 side by side, same task, same wall time.

    llamarl bench losses [--arms aipo,grpo,...] [--seeds 0,1] [--seconds S] [--out FILE] [overrides]

The default recipe (cpu_tiny: a byte-level Llama learning 2-digit addition) is warm started
once (`sync_vs_async.shared_warmstart`, the quality bench's) and every run starts RL from that
checkpoint, so every arm begins at the same held-out accuracy and "gain" (held-out greedy
accuracy at the end minus at the start) compares the losses alone. Each run gets the same RL
wall time (`run.max_time_s`, `run.max_steps` high enough never to bind): an arm whose steps
cost more does fewer of them, which is the comparison a user with a fixed budget makes.
Runs go seed by seed, every chosen arm per seed, so machine noise hits the arms alike.

Each arm is a row of ARMS: Hydra overrides as data, with a one-line why. The k = 4 arms keep
the generator up to four policy versions ahead; the JSON's measured staleness says whether it
was. `--runs DIR` summarizes the finished `<arm>_seed<N>` run directories under DIR (those a
bench run with `--work-dir DIR` keeps) instead of training. Summary: bench/losses_summary.py.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import time
from pathlib import Path

from llamarl_core.bench.losses_summary import assemble, print_table, run_record
from llamarl_core.bench.provenance import ended, git_commit, machine
from llamarl_core.bench.sync_vs_async import freeze_recipe, run_one, shared_warmstart
from llamarl_core.config.errors import ConfigError  # the CLI's one line and exit 2, no traceback
from llamarl_core.config.load import DEFAULT_RECIPE, load_config

STALE_K4 = ("algorithm.max_offpolicy_steps=4",)
ARMS = {  # name -> (overrides on the recipe, why this arm)
    "aipo": ((), "the default: AIPO, token weight min(pi/mu, rho=4), k=1"),
    "grpo": (("algorithm.name=ppo", "algorithm.advantage=std", "algorithm.aggregation=sequence_mean"),
             "GRPO: PPO clipping, std-normalised group advantage, mean per sequence then over sequences"),
    "drgrpo": (("algorithm.name=ppo", "algorithm.advantage=mean", "algorithm.length_norm=constant"),
               "Dr. GRPO: GRPO without the std division and with a constant length normaliser"),
    "gspo": (("algorithm.name=gspo", "algorithm.advantage=std", "algorithm.clip_eps_low=3e-4",
              "algorithm.clip_eps_high=4e-4"),
             "GSPO: one length-normalised ratio per sequence, clipped at the paper's 3e-4 / 4e-4"),
    "aipo_tis_k4": ((*STALE_K4, "algorithm.rho=2"),
                    "staleness 4, AIPO's own weight as token-level TIS: min(pi/mu, 2)"),
    "aipo_mis_k4": ((*STALE_K4, "algorithm.mismatch=mis", "algorithm.mismatch_cap=2"),
                    "staleness 4, AIPO's token cap replaced by sequence-level MIS: a sequence whose "
                    "pi_old/mu (product over its tokens) passes 2 is masked whole"),
}
# Every run: the time cap binds, not the step count; no resumable checkpoints (minutes of disk
# writes across 12 runs, and the shared warm start is the only state reused).
RUN_OVERRIDES = ("run.max_steps=100000", "run.checkpoint_every_steps=0")
# 12 runs (6 arms x 2 seeds) plus the warm start in about 40 minutes on a 2-core CPU: a run
# costs about 10 s beyond run.max_time_s (measured: 27.0 s for run.max_time_s=15, of which RL
# 16.7 s with the last step and final eval; the rest process start, the eval before RL, the
# export), the warm start 20 s alone and 3 minutes beside other jobs: 12 x (180 + 10) s + 20 s
# = 38 minutes.
DEFAULT_SECONDS = 180.0


def parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated arms (default all: {','.join(ARMS)})")
    p.add_argument("--seeds", default="0,1", help="comma-separated run.seed values (default 0,1)")
    p.add_argument("--seconds", type=float, default=DEFAULT_SECONDS,
                   help=f"RL wall time of every run, run.max_time_s (default {DEFAULT_SECONDS:g})")
    p.add_argument("--runs", default=None, metavar="DIR",
                   help="summarize the finished <arm>_seed<N> run directories under DIR instead of training")
    p.add_argument("--note", default="", help="machine, load, what ran beside")
    p.add_argument("overrides", nargs="*", help="key=value overrides passed to every run (recipe=NAME picks it)")
    p.set_defaults(out=os.path.join("benchmarks", "results", "losses_cpu.json"))  # bench_cmd adds --out
    return p


def select_arms(names: str) -> list[str]:
    chosen = [n for n in names.split(",") if n]
    unknown = [n for n in chosen if n not in ARMS]
    if unknown or not chosen:
        raise ConfigError(f"--arms: unknown arm(s) {unknown or chosen}; choose from {', '.join(ARMS)}")
    return chosen


def parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s]
    except ValueError:
        raise ConfigError(f"--seeds {text!r}: comma-separated integers, e.g. 0,1") from None
    if not seeds:
        raise ConfigError("--seeds: at least one seed")
    return seeds


def arm_overrides(arm: str, seed: int, seconds: float) -> list[str]:
    """What one run adds to the frozen recipe (besides the checkpoint and run dir)."""
    return [*RUN_OVERRIDES, *ARMS[arm][0], f"run.seed={seed}", f"run.max_time_s={seconds:g}"]


def check_arms(recipe: str, overrides: list[str], arms: list[str], arm_table: dict = ARMS) -> None:
    """Load every chosen arm's config before anything runs: an arm whose keys or values this
    build lacks stops the bench in a second, naming the arm, not after an hour of other arms."""
    for arm in arms:
        try:
            load_config(recipe, [*overrides, *RUN_OVERRIDES, *arm_table[arm][0]])
        except Exception as e:  # ConfigError, or Hydra's for a key the schema lacks
            raise ConfigError(f"arm {arm} ({' '.join(arm_table[arm][0])}) does not load: {e}") from None


def _recipe(words: list[str]) -> tuple[str, list[str]]:
    recipe = next((w.split("=", 1)[1] for w in words if w.startswith("recipe=")), DEFAULT_RECIPE)
    return recipe, [w for w in words if not w.startswith("recipe=")]


def run(args, command: str) -> int:
    arms, seeds = select_arms(args.arms), parse_seeds(args.seeds)
    recipe, overrides = _recipe(args.overrides)
    at_start, t0 = machine(), time.perf_counter()
    if args.runs:
        warm = None
        records = [run_record(Path(args.runs) / f"{a}_seed{s}", a, s, ARMS[a][0]) for s in seeds for a in arms]
    else:
        check_arms(recipe, overrides, arms)
        records, warm = train_all(recipe, overrides, arms, seeds, args.seconds, args.work_dir)
    caps = {r["max_time_s"] for r in records if r["max_time_s"] is not None}
    seconds = caps.pop() if args.runs and len(caps) == 1 else args.seconds  # --runs: what the runs had
    result = {**assemble(records, ARMS, seconds), "recipe": recipe, "overrides": overrides,
              "warmstart": warm, "command": command, "commit": git_commit(), "note": args.note,
              "wall_s": round(time.perf_counter() - t0, 1), "machine": ended(at_start)}
    print_table(result)
    write(args.out, result)
    return 0


def train_all(recipe: str, overrides: list[str], arms: list[str], seeds: list[int], seconds: float,
              work_dir: str) -> tuple[list[dict], dict]:
    """The shared warm start, then every (seed, arm) run in turn; their records."""
    base = load_config(recipe, overrides)
    frozen = freeze_recipe(work_dir, recipe, overrides)
    warm = shared_warmstart(base, work_dir, log=_log)
    if warm is None:  # the recipe warm starts nothing: RL from its own model.checkpoint
        warm = {"dir": base.model.checkpoint, "steps": 0, "seconds": 0.0}
    start = [f"model.checkpoint={warm['dir']}", "warmstart.steps=0"] if warm["dir"] else []
    records = []
    for seed in seeds:
        for arm in arms:
            run_dir = os.path.join(work_dir, f"{arm}_seed{seed}")
            _log(f"seed {seed}: {arm} ({' '.join(ARMS[arm][0]) or 'recipe as is'})")
            run_one(frozen, [*start, *arm_overrides(arm, seed, seconds), f"run.dir={run_dir}"], log=_log)
            records.append(run_record(Path(run_dir), arm, seed, ARMS[arm][0]))
    return records, warm


def _log(message: str) -> None:
    print(message, flush=True)  # a bench of 40 minutes logged to a file: each line as it happens


def write(out: str, result: dict) -> None:
    """The JSON, then the figure beside it (needs the optional matplotlib: without it, one line)."""
    Path(out).write_text(json.dumps(result, indent=1) + "\n")
    if importlib.util.find_spec("matplotlib") is None:
        print("llamarl bench: plot skipped: matplotlib is not installed (pip install 'llamarl[bench]')")
        return
    from llamarl_core.bench.losses_plot import plot_losses

    result["plot"] = plot_losses(result, os.path.splitext(out)[0] + ".png")
    Path(out).write_text(json.dumps(result, indent=1) + "\n")
