"""CPU seconds and wall time of one small `llamarl train` run, per process, with the torchrun
agents and workers exec'd (LLAMARL_ZYGOTE=0, the launcher before runtime/zygote.py) and forked
(agents from the zygote, workers from a thread-free copy of their agent: runtime/worker_fork.py),
back to back.

    nice -n 19 llamarl bench launch [--runs 2] [--out benchmarks/results/launch_cpu.json] [key=value ...]

Each run is the 4-step run tests/dist makes (`FAST`, as tests/dist/test_runtime.py's: three
roles, one rank each); the modes alternate (exec, zygote, exec, zygote, ...) so machine load hits both
alike. Every process of the run's tree is sampled with psutil every 50 ms, keeping each pid's
last user+system CPU time; processes are named by what they run: cli, zygote, agent:<role>
(the torchrun elastic agent), worker:<role>. `cpu_s_total` is getrusage(RUSAGE_CHILDREN) over
the run (every descendant that was waited for); `cpu_s_sampled` is the sum of the samples;
`started_at_s` is when each process was first seen, from the CLI's start.
Extra key=value words are overrides for the run.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import psutil

from llamarl_core.bench.provenance import ended, git_commit, machine

FAST = ["warmstart.steps=0", "run.max_steps=4", "algorithm.prompts_per_step=4", "algorithm.group_size=4",
        "data.num_eval_examples=8", "data.num_train_examples=64", "generation.max_new_tokens=8",
        "run.eval_every_steps=0", "run.max_time_s=0", "resources.generator.max_batch_size=64",
        "resources.trainer.micro_batch_size=16", "run.weight_checksums=true",
        "controller.startup_timeout_s=90", "controller.heartbeat_timeout_s=20"]


def name_of(p: psutil.Process) -> str:
    try:
        cmd = p.cmdline()
    except psutil.Error:
        return "?"
    if "llamarl_core.runtime.zygote_server" in cmd:
        return "zygote"
    role = next((w.split("=", 1)[1] for w in cmd if w.startswith("role=")), "")
    if "llamarl_core.runtime.worker" in " ".join(cmd) and not any("torchrun" in w or "distributed.run" in w
                                                                   for w in cmd):
        return f"worker:{role}" if role else "worker"
    return f"agent:{role}" if role else "?"


def one_run(overrides: list[str], zygote: bool) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "LLAMARL_ZYGOTE": "1" if zygote else "0"}
    with tempfile.TemporaryDirectory(prefix="llamarl-bench-launch-") as tmp:
        cmd = [sys.executable, "-m", "llamarl_cli.main", "train", f"run.dir={tmp}/run", *FAST, *overrides]
        t0 = time.time()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        root, seen, first = psutil.Process(proc.pid), {}, {}
        while proc.poll() is None:
            try:
                tree = [root, *root.children(recursive=True)]
            except psutil.Error:
                tree = []
            for p in tree:
                try:
                    t = p.cpu_times()
                    name = "cli" if p.pid == root.pid else name_of(p)
                    known = seen.get(p.pid, ("?",))[0]
                    seen[p.pid] = (known if name == "?" else name, t.user + t.system)  # a zombie has no cmdline
                    first.setdefault(p.pid, time.time() - t0)
                except psutil.Error:
                    pass
            time.sleep(0.05)
        wall_s = time.time() - t0
        err = proc.stderr.read()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({proc.returncode}):\n{err[-3000:]}")
    per, started = {}, {}
    for pid, (name, cpu) in seen.items():
        per.setdefault(name, []).append(round(cpu, 2))
        started.setdefault(name, []).append(round(first[pid], 1))
    total = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall_s, 2), "cpu_s_total": round(total, 2),
            "cpu_s_sampled": round(sum(cpu for _, cpu in seen.values()), 2), "processes": len(seen),
            "cpu_s_by_process": dict(sorted(per.items())), "started_at_s": dict(sorted(started.items()))}


def summary(runs: list[dict]) -> dict:
    mean = lambda key: round(statistics.mean(r[key] for r in runs), 2)
    return {"wall_s_mean": mean("wall_s"), "cpu_s_total_mean": mean("cpu_s_total"), "runs": runs}


def parser(prog: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2, help="runs per mode")
    ap.add_argument("overrides", nargs="*", metavar="key=value", help="overrides for each run")
    return ap


def run(args, command: str) -> int:
    at_start = machine()
    runs = {False: [], True: []}
    for _ in range(args.runs):
        for zygote in (False, True):
            runs[zygote].append(one_run(args.overrides, zygote))
            print(("zygote " if zygote else "exec   ") + json.dumps(runs[zygote][-1]), flush=True)
    before, after = summary(runs[False]), summary(runs[True])
    print(f"exec'd agents: {before['cpu_s_total_mean']} CPU-s, {before['wall_s_mean']} s wall; "
          f"zygote: {after['cpu_s_total_mean']} CPU-s, {after['wall_s_mean']} s wall")
    result = {"command": command, "commit": git_commit(),
              "machine": ended(at_start),
              "before": {"launcher": "agents and workers exec'd (LLAMARL_ZYGOTE=0)", **before},
              "after": {"launcher": "agents forked from the zygote, workers from each agent's "
                                    "thread-free copy (runtime/worker_fork.py)", **after}}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    return 0
