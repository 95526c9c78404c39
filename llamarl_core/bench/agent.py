"""The tool-use agent benchmark (issue #47): does a real model learn to use its tool on a CPU?

    llamarl bench agent --out benchmarks/results/agent_calc_cpu.json     # ~30 min on 2 cores
    llamarl bench agent --work-dir runs/agent --out FILE run.max_time_s=300 # any recipe override

Two commands, run one after the other, each timed:
  1. `llamarl eval` of the base checkpoint on the held-out rows, as episodes with the recipe's
     tools (the model has had no demonstration): accuracy and tool calls per episode before;
  2. `llamarl train recipe=agent_calc_cpu`: the warm start on the demonstrations, then RL;
     the trainer's held-out evals (before RL = after the warm start, every eval_every_steps,
     at the end) give the curve.
The JSON: both commands, the machine, the config, the curve (step, seconds since the run
started, eval/accuracy, eval/tool_calls_mean), before / after the warm start / at the end,
and whether the goal holds: held-out accuracy at least GOAL_POINTS above the base model's,
with the whole train command (warm start, RL, evals) within GOAL_MINUTES.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from llamarl_core.bench.provenance import ROOT, ended, git_commit, machine
from llamarl_core.config.load import load_config

RECIPE = "agent_calc_cpu"
GOAL_POINTS, GOAL_MINUTES = 15.0, 30.0


def _llamarl(*words: str) -> list[str]:
    return [sys.executable, "-m", "llamarl_cli.main", *words]


def _timed(cmd: list[str], log_path: Path) -> float:
    """Run `cmd` from the repo root (the recipe's paths are relative), its output to `log_path`;
    seconds it took. A failure raises, naming the log."""
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        code = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT).returncode
    if code != 0:
        raise RuntimeError(f"{' '.join(cmd[2:])} exited {code}; see {log_path}")
    return time.monotonic() - t0


def base_eval(cfg, overrides: list[str], work: Path) -> dict:
    """The base checkpoint's held-out accuracy and tool use, episodes as the run's evals run them."""
    out = work / "base_eval.json"
    words = [f"recipe={RECIPE}", *overrides, f"checkpoint={cfg.model.checkpoint}", f"data={cfg.data.eval_path}",
             f"num_examples={cfg.data.num_eval_examples}", f"run.dir={work / 'base_eval'}",
             "--out", str(out), "--no-progress"]
    seconds = _timed(_llamarl("eval", *words), work / "base_eval.log")
    summary = json.loads(out.read_text())
    return {"command": "llamarl eval " + " ".join(words[:-4]), "wall_s": round(seconds, 1),
            "accuracy": summary["accuracy"], "tool_calls_mean": summary.get("tool_calls_mean"),
            "turns_mean": summary.get("turns_mean"), "n_examples": summary["n_examples"]}


def curve(run_dir: Path) -> list[dict]:
    """One point per held-out eval of the run: the version-0 one (after the warm start, before RL)
    from samples.jsonl and the trainer's log, the others from metrics.jsonl."""
    points = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        m = json.loads(line)
        if "eval/accuracy" in m:
            points[m["step"]] = {"step": m["step"], "seconds": m.get("wall_s"), "accuracy": m["eval/accuracy"],
                                 "tool_calls_mean": m.get("eval/tool_calls_mean"),
                                 "turns_mean": m.get("eval/turns_mean")}
    summary = json.loads((run_dir / "summary.json").read_text())
    episodes = summary.get("eval_episodes_by_version") or {}
    for version, acc in (summary.get("accuracy_by_version") or {}).items():
        stats = episodes.get(version, {})
        points.setdefault(int(version), {"step": int(version), "seconds": None, "accuracy": acc,
                                         "tool_calls_mean": stats.get("eval/tool_calls_mean"),
                                         "turns_mean": stats.get("eval/turns_mean")})
    samples = run_dir / "samples.jsonl"
    for line in samples.read_text().splitlines() if samples.is_file() else ():
        s = json.loads(line)
        p = points.get(s["policy_version"])
        if p is not None and p["seconds"] is None:
            p["seconds"] = s["wall_s"]
    return [points[k] for k in sorted(points)]


def run_agent(overrides: list[str], work: Path, skip_base: bool, log=print) -> dict:
    cfg = load_config(RECIPE, overrides)
    at_start = machine()
    result = {"recipe": RECIPE, "overrides": overrides, "commit": git_commit(),
              "goal": f">= +{GOAL_POINTS:g} points of held-out accuracy over the base model, "
                      f"the whole train command within {GOAL_MINUTES:g} min"}
    if not skip_base:
        log("base model: llamarl eval over episodes ...")
        result["base"] = base_eval(cfg, overrides, work)
        log(f"base model: accuracy {result['base']['accuracy']:.3f}, tool calls/episode "
            f"{result['base']['tool_calls_mean']}")
    run_dir = work / "run"
    words = [f"recipe={RECIPE}", *overrides, f"run.dir={run_dir}"]
    log(f"train: llamarl {' '.join(['train', *words])} ...")
    seconds = _timed(_llamarl("train", *words), work / "train.log")
    points = curve(run_dir)
    before = result.get("base", {}).get("accuracy")
    after = points[-1]["accuracy"] if points else None
    result.update({
        "train_command": "llamarl train " + " ".join(words[:-1]), "train_wall_min": round(seconds / 60, 2),
        "curve": points,
        "after_warmstart": points[0] if points else None, "end": points[-1] if points else None,
        "gain_points_over_base": None if before is None or after is None else round(100 * (after - before), 1),
        "gain_points_over_warmstart": None if not points else round(100 * (after - points[0]["accuracy"]), 1),
        "config_yaml": (run_dir / "config.yaml").read_text(),
        "machine": ended(at_start),
    })
    result["goal_met"] = (result["gain_points_over_base"] is not None
                          and result["gain_points_over_base"] >= GOAL_POINTS and seconds / 60 <= GOAL_MINUTES)
    return result


def parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("overrides", nargs="*", help="recipe overrides (key=value), for both commands")
    p.add_argument("--skip-base", action="store_true", help="no base-model eval (the gain over the base is then unset)")
    return p


def run(args, command: str) -> int:
    work = Path(args.work_dir)
    result = {"command": command, **run_agent(list(args.overrides), work, args.skip_base)}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    shown = {k: v for k, v in result.items() if k not in ("config_yaml", "curve", "machine")}
    print(json.dumps(shown, indent=1))
    return 0
