"""Resume after SIGKILL, end to end on gloo. The trainer (or the sync actor) is killed
mid-run: the run must end naming it with no process left; `run.resume=auto` then continues
from the newest STABLE checkpoint. Sync (k = 0) reproduces the uninterrupted run exactly;
async trains every example id at most once and reaches the same step count."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from test_runtime import FAST, metrics, processes_mentioning, train

# A short supervised warm start on 1-digit sums so rewards (and gradients) are not all zero.
LEARNS = ["data.digits=1", "data.solution_style=short", "warmstart.steps=40", "warmstart.batch_size=16",
          "warmstart.lr=3e-3", "run.checkpoint_every_steps=5", "run.weight_checksums=false"]


def worker_pid(run_dir: Path, role: str) -> int | None:
    log = run_dir / "logs" / f"{role}_0.log"
    if not log.exists() or not log.read_text():
        return None
    return int(log.read_text().splitlines()[0].split(" pid ")[1].split()[0])


def kill_at_step(run_dir: Path, role: str, step: int, *overrides: str) -> str:
    """Start a run, SIGKILL `role` rank 0 once metrics reach `step`; returns the CLI's stderr."""
    cmd = [sys.executable, "-m", "llamarl_cli.main", "train", f"run.dir={run_dir}", *FAST, *overrides]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    path, deadline = run_dir / "metrics.jsonl", time.time() + 150
    while time.time() < deadline and proc.poll() is None:
        if path.exists() and len(path.read_text().splitlines()) >= step:
            os.kill(worker_pid(run_dir, role), signal.SIGKILL)
            break
        time.sleep(0.02)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, f"the run was not killed mid-way: {err[-2000:]}"
    assert f"role {role} rank 0" in err, err[-2000:]
    # It names the signal and, with a stable checkpoint on disk, the command that continues;
    # the log tail is the rank's own lines, not the metrics JSON it echoes.
    assert "was killed by SIGKILL" in err and f"run.dir={run_dir} run.resume=auto" in err, err[-2000:]
    tail = err.split("'s log ---", 1)[1].split("\nlogs: ", 1)[0]
    assert tail.strip() and not any(line.startswith('{"wall_s"') for line in tail.splitlines()), tail
    time.sleep(0.5)
    assert processes_mentioning(str(run_dir)) == []  # the trainer's death leaves no orphan
    return err


def final_weights(run_dir: Path) -> dict:
    return load_file(run_dir / "checkpoints" / "final" / "model.safetensors")


def trained(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "trained_examples.jsonl").read_text().splitlines()]


def test_sync_run_killed_at_step_8_and_resumed_matches_the_uninterrupted_run(tmp_path):
    # 12 steps, a checkpoint every 3: killed at 8, resumed from step 6; 4 checkpoints made, 2 kept.
    every = [x for x in LEARNS if not x.startswith("run.checkpoint_every_steps=")]
    opts = [*every, "run.checkpoint_every_steps=3", "algorithm.max_offpolicy_steps=0", "run.max_steps=12"]
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    out = train(whole, *opts)
    assert out.returncode == 0, out.stderr[-3000:]
    kill_at_step(broken, "actor", 8, *opts)
    out = train(broken, *opts, "run.resume=auto")
    assert out.returncode == 0, out.stderr[-3000:]
    a, b = metrics(whole), metrics(broken)
    assert [m["step"] for m in b] == list(range(1, 13))  # no gap, no duplicate
    assert [m["reward/mean"] for m in b] == [m["reward/mean"] for m in a]
    assert any(m["reward/mean"] > 0 for m in a)  # the comparison is not between zeros
    for m, n in zip(a, b):
        assert abs(m["trainer/grad_norm"] - n["trainer/grad_norm"]) <= 1e-6
    wa, wb = final_weights(whole), final_weights(broken)
    assert max(float((wa[k] - wb[k]).abs().max()) for k in wa) <= 1e-6
    assert trained(broken) == trained(whole)
    assert len(list((broken / "checkpoints").glob("step_*"))) == 2  # run.keep_checkpoints


@pytest.mark.parametrize("trainers", [
    [],
    # FSDP2 over 2 trainer ranks: the checkpoint holds one DCP shard per rank.
    ["resources.trainer.num_devices=2", "resources.trainer.strategy=fsdp2", "resources.cpu_cores=4"],
], ids=["one_trainer", "fsdp2_two_trainers"])
def test_async_run_killed_and_resumed_trains_no_example_twice_and_every_step_once(tmp_path, trainers):
    run_dir = tmp_path / "async"
    opts = [*LEARNS, *trainers, "algorithm.max_offpolicy_steps=1", "run.max_steps=14"]
    kill_at_step(run_dir, "trainer", 7, *opts)
    out = train(run_dir, *opts, "run.resume=auto")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "resumed from" in (run_dir / "logs" / "trainer_0.log").read_text()
    lines = trained(run_dir)
    assert [x["step"] for x in lines] == list(range(1, 15))
    assert [m["step"] for m in metrics(run_dir)] == list(range(1, 15))
    # 64 examples, 4 prompts a step: 14 steps stay inside one epoch, so no id may repeat
    # (a dropped stale chunk skips its ids; it never makes any train twice).
    ids = [i for x in lines for i in x["example_ids"]]
    assert len(ids) == 14 * 4 and len(set(ids)) == len(ids)
    assert all(x["policy_version"] == x["step"] for x in lines)
    shards = list((run_dir / "checkpoints" / "step_10" / "trainer").glob("*.distcp"))
    assert len(shards) == (2 if trainers else 1)
