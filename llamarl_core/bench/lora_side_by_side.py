"""Benchmark: full fine-tuning vs LoRA RL on the real model, side by side (issue #48).

    llamarl train recipe=smollm2_cpu       run.max_time_s=T ...   (full: every weight trained, synced)
    llamarl train recipe=smollm2_lora_cpu  run.max_time_s=T ...   (LoRA: rank 16, adapters synced)

one after the other, the same wall budget `--max-time-s` each and the same extra overrides, each
watched by the real-model bench's peak-RSS watcher (bench/real_model.py `watch`, a thread
polling the run's workers' VmHWM) and summarized by its `summarize` (held-out accuracy before
and after, step times and their split, busy shares per role from the timelines, peak RSS per
role), plus the weight sync from metrics.jsonl (`sync/bytes` and `sync/seconds` per sync).
One JSON holds both runs and the ratios LoRA/full: the accuracy gain's difference in points,
the trainer's train seconds per step, its peak RSS, the bytes per sync, and both roles' busy
shares.

    llamarl bench lora --out benchmarks/results/lora_vs_full_cpu.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
from pathlib import Path

from llamarl_core.bench.provenance import ROOT, ended, git_commit, machine
from llamarl_core.bench.real_model import summarize, watch

RECIPES = {"lora": "smollm2_lora_cpu", "full": "smollm2_cpu"}  # LoRA first: a failure shows in minutes


def parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--max-time-s", type=float, default=900.0, help="run.max_time_s of each run (default 900)")
    p.add_argument("--note", default="", help="machine, load, what ran beside")
    p.add_argument("--runs", default=None, help="summarize the two finished runs under this directory (named by "
                   "recipe, as this bench leaves them) instead of training")
    p.add_argument("overrides", nargs="*", help="key=value overrides passed to both runs")
    return p


def sync_stats(run_dir: Path) -> dict:
    """Per sync (median over the run's metrics lines that carry one): bytes and seconds."""
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    syncs = [m for m in lines if "sync/bytes" in m]
    plan_file = run_dir / "plan.json"
    plan = (json.loads(plan_file.read_text()).get("weight_sync") or {}) if plan_file.is_file() else {}
    return {"syncs": len(syncs), "planned_bytes_per_version": plan.get("bytes_per_version"),  # llamarl plan's figure
            "bytes_per_sync": statistics.median(m["sync/bytes"] for m in syncs) if syncs else None,
            "seconds_per_sync": statistics.median(m["sync/seconds"] for m in syncs) if syncs else None}


def run_summary(run_dir: Path, command: str, note: str = "") -> dict:
    """The real-model summary of one finished run, with its sync stats and busy shares."""
    out = summarize(run_dir, command, note)
    out["sync"] = sync_stats(run_dir)
    out["busy_share"] = {role: out["roles"][role]["busy_fraction"] for role in ("generator", "trainer")
                         if role in out["roles"]}
    return out


def _ratio(a, b):
    return a / b if a is not None and b else None


def assemble(full: dict, lora: dict, max_time_s: float) -> dict:
    """Both runs' summaries and the LoRA/full comparison."""
    def train_s(r):
        return r["step_time_split_s"]["training"]

    def trainer_rss(r):
        return (r["peak_rss_gib"] or {}).get("trainer")
    comparison = {
        "accuracy_gain_points": {"full": full["accuracy_gain_points"], "lora": lora["accuracy_gain_points"],
                                 "lora_minus_full": round(lora["accuracy_gain_points"] - full["accuracy_gain_points"], 1)},
        "trainer_train_s_per_step": {"full": train_s(full), "lora": train_s(lora),
                                     "ratio": _ratio(train_s(lora), train_s(full))},
        "trainer_peak_rss_gib": {"full": trainer_rss(full), "lora": trainer_rss(lora),
                                 "ratio": _ratio(trainer_rss(lora), trainer_rss(full))},
        "sync_bytes_per_sync": {"full": full["sync"]["bytes_per_sync"], "lora": lora["sync"]["bytes_per_sync"],
                                "ratio": _ratio(lora["sync"]["bytes_per_sync"], full["sync"]["bytes_per_sync"])},
        "sync_seconds_per_sync": {"full": full["sync"]["seconds_per_sync"], "lora": lora["sync"]["seconds_per_sync"],
                                  "ratio": _ratio(lora["sync"]["seconds_per_sync"], full["sync"]["seconds_per_sync"])},
        # what moved per sync against the tensors it had to move (the plan's figure: the adapters' own bytes)
        "sync_bytes_vs_planned": {"full": _ratio(full["sync"]["bytes_per_sync"], full["sync"]["planned_bytes_per_version"]),
                                  "lora": _ratio(lora["sync"]["bytes_per_sync"], lora["sync"]["planned_bytes_per_version"])},
        "busy_share": {"full": full["busy_share"], "lora": lora["busy_share"]},
        "rl_steps": {"full": full["rl_steps"], "lora": lora["rl_steps"]},
    }
    return {"benchmark": "lora_vs_full", "max_time_s": max_time_s, "comparison": comparison,
            "runs": {"full": full, "lora": lora}}


def _train_words(recipe: str, max_time_s: float, overrides: list[str], run_dir: Path) -> list[str]:
    return [f"recipe={recipe}", f"run.max_time_s={max_time_s:g}", f"run.dir={run_dir}", *overrides]


def train_and_watch(recipe: str, max_time_s: float, overrides: list[str], work_dir: Path, note: str) -> dict:
    """One `llamarl train` run from the repo root (the recipes' paths are relative), its workers'
    peak RSS watched beside it; its summary."""
    run_dir = work_dir / recipe
    words = _train_words(recipe, max_time_s, overrides, run_dir)
    watcher = threading.Thread(target=watch, args=(run_dir, run_dir / "peak_rss.json", 2.0, max_time_s + 3600),
                               daemon=True)
    watcher.start()
    log = work_dir / f"{recipe}.log"
    with open(log, "w") as f:
        code = subprocess.run([sys.executable, "-m", "llamarl_cli.main", "train", *words], cwd=ROOT,
                              stdout=f, stderr=subprocess.STDOUT).returncode
    watcher.join(timeout=30)
    if code != 0:
        raise RuntimeError(f"llamarl train {' '.join(words)} exited {code}; see {log}")
    return run_summary(run_dir, "llamarl train " + " ".join(words), note)


def run(args, command: str) -> int:
    at_start = machine()
    work_dir = Path(args.work_dir)
    runs = {}
    for name, recipe in RECIPES.items():
        if args.runs:
            words = _train_words(recipe, args.max_time_s, args.overrides, Path(args.runs) / recipe)
            runs[name] = run_summary(Path(args.runs) / recipe, "llamarl train " + " ".join(words), args.note)
            continue
        print(f"{name}: llamarl train recipe={recipe} run.max_time_s={args.max_time_s:g} (log: "
              f"{work_dir / recipe}.log)", flush=True)
        runs[name] = train_and_watch(recipe, args.max_time_s, args.overrides, work_dir, args.note)
    result = {**assemble(runs["full"], runs["lora"], args.max_time_s), "command": command, "commit": git_commit(),
              "note": args.note, "overrides": args.overrides, "machine": ended(at_start)}
    _print(result["comparison"])
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


def _print(c: dict) -> None:
    def fmt(x):
        return "-" if x is None else f"{x:.3g}"
    print(f"{'':<26}{'full':>10}{'lora':>10}{'lora/full':>11}")
    for key in ("trainer_train_s_per_step", "trainer_peak_rss_gib", "sync_bytes_per_sync", "sync_seconds_per_sync",
                "sync_bytes_vs_planned"):
        v = c[key]
        print(f"{key:<26}{fmt(v['full']):>10}{fmt(v['lora']):>10}{fmt(v.get('ratio')):>11}")
    g = c["accuracy_gain_points"]
    print(f"{'accuracy gain (points)':<26}{fmt(g['full']):>10}{fmt(g['lora']):>10}{g['lora_minus_full']:>+10.1f}")
