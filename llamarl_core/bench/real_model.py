"""The real-model run as one JSON: accuracy before/after RL, wall time, the accuracy curve, the
step time split, tokens/s and peak RSS per role (benchmarks/results/real_model_cpu.json).

    # beside a run (another shell), peak RSS per role from /proc (VmHWM of each role's workers):
    llamarl bench real-model watch RUN_DIR --out RUN_DIR/peak_rss.json
    # after it, from the run directory (metrics.jsonl, summary.json, timeline/, peak_rss.json):
    llamarl bench real-model summarize RUN_DIR --command "llamarl train recipe=smollm2_cpu ..." \
        --out benchmarks/results/real_model_cpu.json

`watch` polls every `--every-s` seconds the processes whose command line names the run's
plan.json (`role=<role> plan=RUN_DIR/plan.json`, the workers torchrun starts) and keeps the largest
VmHWM (the kernel's peak resident set) seen per role, until the run writes summary.json or its
workers are gone. Neither uses a bench work dir: `watch` writes beside the run, `summarize`
prints its JSON and writes it only to --out.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from llamarl_core.bench.provenance import git_commit, load_average
from llamarl_core.bench.run_stats import run_stats

WORK_DIR = False  # `llamarl bench` gives this bench no work dir (see above)


def _workers(plan: str) -> dict[int, str]:
    """pid -> role of every live worker of the run whose plan.json is `plan`."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [a.decode(errors="replace") for a in args]
        if (f"plan={plan}" in words and "llamarl_core.runtime.worker" in words
                and "llamarl_core.runtime.loopback_torchrun" not in words):  # the worker, not its torchrun
            role = next((w.split("=", 1)[1] for w in words if w.startswith("role=")), None)
            if role:
                found[int(pid)] = role
    return found


def _peak_rss_gib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**20  # kB -> GiB
    except OSError:
        return None
    return None


def watch(run_dir: Path, out: Path, every_s: float, timeout_s: float) -> dict:
    plan, peak, seen, start = str(run_dir.resolve() / "plan.json"), {}, False, time.monotonic()
    while time.monotonic() - start < timeout_s:
        workers = _workers(plan) if os.path.isfile(plan) else {}
        seen = seen or bool(workers)
        for pid, role in workers.items():
            rss = _peak_rss_gib(pid)
            if rss is not None:
                peak[role] = max(peak.get(role, 0.0), rss)
        if os.path.isdir(out.parent):
            out.write_text(json.dumps({"peak_rss_gib": {k: round(v, 3) for k, v in peak.items()},
                                       "every_s": every_s}) + "\n")
        if (run_dir / "summary.json").is_file() or (seen and not workers):
            break
        time.sleep(every_s)
    return json.loads(out.read_text())


def summarize(run_dir: Path, command: str, note: str) -> dict:
    stats = run_stats(str(run_dir), target_accuracy=1.0)
    summary = json.loads((run_dir / "summary.json").read_text())
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rss_file = run_dir / "peak_rss.json"
    last = metrics[-1]
    rl_wall = stats["rl_wall_s"]
    tokens_per_s = {
        "generator": last.get("generator/tokens", 0) / rl_wall if rl_wall else None,  # sampled tokens
        "trainer": sum(m.get("trainer/completion_tokens", 0) for m in metrics) / rl_wall if rl_wall else None,
        "generator_while_busy": statistics.median(m["generator/tokens_per_s"] for m in metrics
                                                  if m.get("generator/tokens_per_s")),
        "trainer_while_busy": statistics.median(m["trainer/tokens_per_s"] for m in metrics
                                                if m.get("trainer/tokens_per_s")),
    }
    phases = stats["phase_s_per_step"]
    return {
        "command": command, "commit": git_commit(), "note": note, "run_dir": str(run_dir),
        "recipe": summary["recipe"], "mode": summary["mode"],
        "accuracy_before": summary["accuracy_before"], "accuracy_after": summary["accuracy_after"],
        "accuracy_gain_points": round(100 * (summary["accuracy_after"] - summary["accuracy_before"]), 1),
        "run_wall_s": round((run_dir / "summary.json").stat().st_mtime - (run_dir / "plan.json").stat().st_mtime, 1),
        "rl_wall_s": round(rl_wall, 1), "rl_steps": summary["steps"],
        "accuracy_curve": stats["accuracy_curve"],
        "reward_curve": [{k: r[k] for k in ("step", "wall_s", "reward_mean")} for r in stats["reward_curve"]],
        "step_s": {"median": statistics.median(stats["step_s"]), "min": min(stats["step_s"]),
                   "max": max(stats["step_s"])} if stats["step_s"] else None,
        # Mean seconds per RL step each phase kept its role busy (timeline spans); async roles
        # overlap, so these do not add up to step_s.
        "step_time_split_s": {"generation": phases.get("generate"), "reward": phases.get("score"),
                              "training": phases.get("train"), "sync": stats["sync_s_per_step"],
                              **{k: v for k, v in phases.items() if k not in ("generate", "score", "train")}},
        "roles": stats["roles"],
        "tokens_per_s": tokens_per_s,
        "peak_rss_gib": json.loads(rss_file.read_text())["peak_rss_gib"] if rss_file.is_file() else None,
        "staleness_max": max(m["trainer/staleness_max"] for m in metrics),
        "dropped_chunks": summary.get("dropped_chunks"),
        "load_average_at_summary": load_average(),
        "config_yaml": (run_dir / "config.yaml").read_text(),
    }


def parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="verb", required=True)
    w = sub.add_parser("watch")
    w.add_argument("run_dir", type=Path)
    w.add_argument("--out", type=Path)
    w.add_argument("--every-s", type=float, default=2.0)
    w.add_argument("--timeout-s", type=float, default=7200.0)
    s = sub.add_parser("summarize")
    s.add_argument("run_dir", type=Path)
    s.add_argument("--out", type=Path)
    s.add_argument("--command", default="")
    s.add_argument("--note", default="", help="machine, load, what ran beside")
    return p


def run(args, command: str) -> int:
    if args.verb == "watch":
        print(json.dumps(watch(args.run_dir, args.out or args.run_dir / "peak_rss.json", args.every_s,
                               args.timeout_s)))
        return 0
    result = summarize(args.run_dir, args.command, args.note)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("config_yaml", "roles", "reward_curve")}, indent=2))
    return 0
