"""Summarize a run directory into one JSON: accuracy before/after RL, wall time, step stats.

    python scripts/summarize_run.py runs/cpu_tiny --out benchmarks/results/default_run_cpu.json

Several run directories (runs started side by side, each on a share of the machine) give one
JSON with each run's summary under "runs" and the headline numbers as lists:

    python scripts/summarize_run.py /tmp/slowA /tmp/slowB --note "..." --out benchmarks/results/default_run_cpu_slow_machine.json
"""
from __future__ import annotations

import argparse
import bisect
import json
import statistics
from pathlib import Path

from llamarl_core.bench.provenance import git_commit, load_average, machine
from llamarl_core.bench.run_stats import idle_breakdown, read_timeline, step_busy_shares


# metric keys before wave 3's role/quantity renames (CHANGELOG.md), so older run dirs summarize too
OLD_KEYS = {"trainer/step_s": "step_s", "reward/mean": "reward_mean"}


def _get(line: dict, key: str):
    return line[key] if key in line else line[OLD_KEYS[key]]


def pipeline_shares(lines: list[dict]) -> dict:
    """Per RL step after the first: each role's busy share of the step (from the cumulative busy_s
    and wall_s of consecutive lines), the busier role's, and both-idle share of the RL window."""
    out: dict = {}
    if len(lines) < 2 or "trainer/busy_s" not in lines[0]:
        return out
    for role in ("trainer", "generator"):
        shares = []
        for a, b in zip(lines[1:], lines[2:]):
            wall = b["trainer/wall_s"] - a["trainer/wall_s"]
            if f"{role}/busy_s" in a and wall > 0:
                shares.append((b[f"{role}/busy_s"] - a[f"{role}/busy_s"]) / wall)
        if shares:
            out[f"{role}_busy_per_step"] = {"median": statistics.median(shares), "min": min(shares),
                                            "steps_busy_95pct_frac": sum(x >= 0.95 for x in shares) / len(shares)}
    busy = {r: out[f"{r}_busy_per_step"]["median"] for r in ("trainer", "generator") if f"{r}_busy_per_step" in out}
    if busy:
        out["bottleneck_role"] = max(busy, key=busy.get)
        out["bottleneck_busy_per_step"] = out[f"{out['bottleneck_role']}_busy_per_step"]
    if "pipeline/both_idle_frac" in lines[-1]:
        out["both_idle_frac"] = lines[-1]["pipeline/both_idle_frac"]
    return out


def timeline_steps(spans: list[dict], floor: float = 0.95) -> dict:
    """Per RL step after the first, from the timelines (the window between two trainer `train`
    ends; steps numbered as in metrics.jsonl): how many have the trainer, or either of trainer and
    generator, busy >= `floor`, and each step where the trainer is not, with the generator's
    share and the trainer's wait for its rows in it (a miss where the generator is busy is a
    step the generator bounds; one where both idle is waste), and each step where neither role
    reaches `floor`, with who idled while whom worked in it (`run_stats.idle_breakdown`)."""
    rows = []
    for r in step_busy_shares(spans):
        a, b = r["t0"], r["t1"]
        wait = sum(min(w["t1"], b) - max(w["t0"], a) for w in spans if w["role"] == "trainer" and w["rank"] == 0
                   and w["state"] == "wait" and w["t1"] > a and w["t0"] < b)
        rows.append({"step": r["step"] + 1, "t0": a, "t1": b, "s": b - a, "trainer": r["trainer"],
                     "generator": r["generator"], "trainer_wait_s": wait})
    pct = f"{100 * floor:.0f}pct"
    busier = [max(r["trainer"], r["generator"]) for r in rows]  # each step's bottleneck role's share
    return {"steps": len(rows), f"trainer_busy_{pct}": sum(r["trainer"] >= floor for r in rows),
            f"trainer_or_generator_busy_{pct}": sum(x >= floor for x in busier),
            "busier_role_busy_min": min(busier, default=None),
            "trainer_misses": [r for r in rows if r["trainer"] < floor],
            "busier_role_misses": [{**r, **idle_breakdown(spans, r["t0"], r["t1"])}
                                   for r, x in zip(rows, busier) if x < floor]}


def weight_adoption(spans: list[dict]) -> dict:
    """From the timelines: how long each published version waited before generator rank 0 began
    taking it (a trainer `sync` span's end to the next generator `sync` span's start, each publish
    counted once), split by what the generator was doing when it landed: in a `generate` span (a
    stream or chunk decoding: it is seen at a between-steps look) or waiting for it."""
    pubs = sorted(s["t1"] for s in spans if s["role"] == "trainer" and s["rank"] == 0 and s["state"] == "sync")
    takes = sorted(s["t0"] for s in spans if s["role"] == "generator" and s["rank"] == 0 and s["state"] == "sync")
    gens = [(s["t0"], s["t1"]) for s in spans if s["role"] == "generator" and s["rank"] == 0 and s["state"] == "generate"]
    lat: dict = {"generating": [], "waiting": []}
    counted = 0  # publishes before this index were taken already
    for t in takes:
        landed = bisect.bisect_right(pubs, t)
        if landed == counted:
            continue  # the first version (before RL) or one already counted
        p = pubs[landed - 1]  # a version skipped for a newer one is not a wait of its own
        counted = landed
        lat["generating" if any(a <= p <= b for a, b in gens) else "waiting"].append(1e3 * (t - p))

    def stats(xs):
        return {"n": len(xs), "mean_ms": statistics.mean(xs), "median_ms": statistics.median(xs),
                "max_ms": max(xs)} if xs else {"n": 0}
    return {"published_while_generating": stats(lat["generating"]), "published_while_waiting": stats(lat["waiting"]),
            "total_s": sum(lat["generating"] + lat["waiting"]) / 1e3}


def summarize(run_dir: Path) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text())
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    config = (run_dir / "config.yaml").read_text()
    spans = read_timeline(str(run_dir)) if (run_dir / "timeline").is_dir() else None
    step_s = [_get(m, "trainer/step_s") for m in lines]
    return {
        "run_dir": str(run_dir), "recipe": summary["recipe"], "mode": summary["mode"],
        "accuracy_before": summary["accuracy_before"], "accuracy_after": summary["accuracy_after"],
        "accuracy_gain_points": round(100 * (summary["accuracy_after"] - summary["accuracy_before"]), 1),
        "accuracy_by_version": summary["accuracy_by_version"],
        "rl_steps": summary["steps"], "rl_wall_s": summary["rl_wall_s"],
        "trainer_wall_s": lines[-1]["wall_s"] if lines else None,
        # controller start (plan.json written) to the end of training (summary.json written)
        "run_wall_s": round((run_dir / "summary.json").stat().st_mtime - (run_dir / "plan.json").stat().st_mtime, 1),
        "step_s": {"median": statistics.median(step_s), "min": min(step_s), "max": max(step_s)},
        "reward_mean": {"first": _get(lines[0], "reward/mean"), "last": _get(lines[-1], "reward/mean")},
        "staleness_max": max(m["trainer/staleness_max"] for m in lines),
        "dropped_chunks": summary["dropped_chunks"],
        "pipeline": pipeline_shares(lines),
        "pipeline_from_timelines": timeline_steps(spans) if spans is not None else None,
        "weight_adoption": weight_adoption(spans) if spans is not None else None,
        "sync_seconds_median": statistics.median(m.get("sync/seconds", 0.0) for m in lines),
        "machine": machine(load=False),
        "config_yaml": config,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dirs", type=Path, nargs="+")
    p.add_argument("--out", type=Path)
    p.add_argument("--command", default="", help="the command that made the run(s)")
    p.add_argument("--note", default="", help="how the runs were made (machine, load, what ran beside)")
    p.add_argument("--commit", default="", help="the commit the run(s) ran (default: this checkout's HEAD)")
    p.add_argument("--command-wall-s", type=float, help="the whole command's wall seconds, timed outside it")
    p.add_argument("--loadavg-at-start", default="", help="1,5,15-minute load averages before the run "
                   "(the ones at the end are read here, run right after it)")
    args = p.parse_args()
    runs = [summarize(d) for d in args.run_dirs]
    result = runs[0] if len(runs) == 1 else {
        key: [r[key] for r in runs] for key in ("accuracy_before", "accuracy_after", "accuracy_gain_points",
                                                "rl_steps", "run_wall_s")}
    if len(runs) > 1:
        result["step_s_median"] = [r["step_s"]["median"] for r in runs]
        result["config_yaml"] = runs[0]["config_yaml"]
        result["runs"] = [{k: v for k, v in r.items() if k != "config_yaml"} for r in runs]
    head = {k: v for k, v in (("command", args.command), ("note", args.note)) if v}
    head["commit"] = args.commit or git_commit()
    if args.command_wall_s is not None:
        head["command_wall_s"] = args.command_wall_s
    if args.loadavg_at_start:
        head["loadavg_at_start"] = [float(x) for x in args.loadavg_at_start.split(",")]
        head["loadavg_at_end"] = load_average()
    result = {**head, **result}
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "config_yaml"}, indent=2))


if __name__ == "__main__":
    main()
