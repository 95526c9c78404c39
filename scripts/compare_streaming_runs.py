"""Summarize a streaming and a chunked run of the same recipe into one JSON (issue [7/7]).

Per run, from its run directory (llamarl_core/bench/run_stats.py, transport/idle.py): the
roles' busy fractions over the RL window, `both_idle_fraction` (trainer and generator both
idle), per step after the first the bottleneck role's busy fraction (the busier of generator
and trainer over the whole window) and the busier role's in each step, step times and the
held-out accuracy gain.

    python scripts/compare_streaming_runs.py --streaming RUN_A --chunked RUN_B \
        --command "how the runs were started" --out benchmarks/results/streaming_default_run_cpu.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

from llamarl_core.bench.provenance import git_commit
from llamarl_core.bench.run_stats import (read_timeline, rl_window, role_fractions, step_busy_shares, step_ends,
                                          step_times)
from llamarl_core.transport.idle import both_idle_frac


def summarize(run_dir: str) -> dict:
    spans = read_timeline(run_dir)
    t0, t1 = rl_window(spans)
    roles = role_fractions(spans, t0, t1)
    bottleneck = max(("generator", "trainer"), key=lambda r: roles.get(r, {}).get("busy_fraction", 0.0))
    per_step = step_busy_shares(spans)  # steps after the first
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    after_first = [r[bottleneck] for r in per_step]
    busier = [max(r["generator"], r["trainer"]) for r in per_step]
    steps = len(step_ends([x for x in spans if x["role"] == "trainer" and x["rank"] == 0]))
    return {"run_dir": run_dir, "rl_wall_s": t1 - t0, "steps": steps,
            "step_s_median": statistics.median(step_times(spans, t0)),
            "busy_fraction": {r: v["busy_fraction"] for r, v in roles.items()},
            "both_idle_fraction": both_idle_frac(spans, ("trainer", "generator"), t0, t1),
            "bottleneck_role": bottleneck,
            "bottleneck_busy_per_step_after_first": {
                "min": min(after_first), "median": statistics.median(after_first),
                "steps_at_or_above_0.95": sum(x >= 0.95 for x in after_first), "steps": len(after_first)},
            "busier_role_busy_per_step_after_first": {  # the busier of the two in each step
                "min": min(busier), "median": statistics.median(busier),
                "steps_busy_95pct": sum(x >= 0.95 for x in busier), "steps": len(busier)},
            "accuracy_before": summary.get("accuracy_before"), "accuracy_after": summary.get("accuracy_after"),
            "accuracy_gain_points": (100 * (summary["accuracy_after"] - summary["accuracy_before"])
                                     if summary.get("accuracy_after") is not None else None),
            "dropped_chunks": summary.get("dropped_chunks")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--streaming", required=True)
    p.add_argument("--chunked", required=True)
    p.add_argument("--command", required=True, help="the commands that produced the two runs")
    p.add_argument("--load", default="", help="machine load during the runs (uptime lines)")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    s, c = summarize(args.streaming), summarize(args.chunked)
    report = {"command": args.command, "summarized_by": " ".join([sys.executable] + sys.argv),
              "commit": git_commit(), "machine_load": args.load, "streaming": s, "chunked": c,
              "targets": {"bottleneck_busy_after_first_step": 0.95, "both_idle_fraction_max": 0.02},
              "gain_difference_points": (s["accuracy_gain_points"] - c["accuracy_gain_points"]
                                         if None not in (s["accuracy_gain_points"], c["accuracy_gain_points"]) else None)}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    for name, r in (("streaming", s), ("chunked", c)):
        print(f"{name}: step {r['step_s_median']:.2f} s, busy {r['busy_fraction']}, both idle "
              f"{r['both_idle_fraction']:.3f}, bottleneck {r['bottleneck_role']} median "
              f"{r['bottleneck_busy_per_step_after_first']['median']:.2f}, gain {r['accuracy_gain_points']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
