"""Resume after SIGKILL, end to end on gloo. The trainer (or the sync actor) is killed
mid-run: the run must end naming it with no process left; `run.resume=auto` then continues
from the newest STABLE checkpoint. Sync (k = 0) reproduces the uninterrupted run exactly;
async trains every example id at most once and reaches the same step count. The sync runs
also show sync mode is on-policy (every importance ratio is one, nothing generated while the
actors train)."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from llamarl_core.bench.run_stats import overlap_s, read_timeline, rl_window
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


# 12 steps, a checkpoint every 3: killed at 8, resumed from step 6; 4 checkpoints made, 2 kept.
# aipo / mean / token_mean at k = 0 spelled out: one of test_every_choice_trains' combinations.
SYNC_OPTS = [*(x for x in LEARNS if not x.startswith("run.checkpoint_every_steps=")), "run.checkpoint_every_steps=3",
             "algorithm.name=aipo", "algorithm.advantage=mean", "algorithm.aggregation=token_mean",
             "algorithm.max_offpolicy_steps=0", "run.max_steps=12"]


@pytest.fixture(scope="module")
def sync_runs(tmp_path_factory):
    """(uninterrupted run, the same run killed at step 8 and resumed)."""
    tmp = tmp_path_factory.mktemp("sync")
    whole, broken = tmp / "whole", tmp / "broken"
    out = train(whole, *SYNC_OPTS)
    assert out.returncode == 0, out.stderr[-3000:]
    kill_at_step(broken, "actor", 8, *SYNC_OPTS)
    out = train(broken, *SYNC_OPTS, "run.resume=auto")
    assert out.returncode == 0, out.stderr[-3000:]
    return whole, broken


def test_sync_run_killed_at_step_8_and_resumed_matches_the_uninterrupted_run(sync_runs):
    whole, broken = sync_runs
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


def test_sync_mode_is_on_policy_every_importance_ratio_is_one(sync_runs):
    run_dir = sync_runs[0]
    lines = metrics(run_dir)
    assert len(lines) == 12
    for m in lines:
        assert m["trainer/staleness_max"] == 0
        assert abs(m["trainer/is_ratio_max"] - 1.0) < 1e-5
        assert abs(m["trainer/is_ratio_mean"] - 1.0) < 1e-5
    plan = json.loads((run_dir / "plan.json").read_text())
    assert [r["name"] for r in plan["roles"]] == ["actor", "reward"]
    # Sync means turns: nothing is generated while the actors train. A rank that finished its
    # chunk first enters "train" and waits there (DDP) for the others, so the training phase
    # is when every actor rank is in "train".
    spans = read_timeline(str(run_dir))
    t0, t1 = rl_window(spans)
    actor_ranks = sorted({s["rank"] for s in spans if s["role"] == "actor"})
    all_training = [(max(s["t0"] for s in step), min(s["t1"] for s in step))
                    for step in _train_spans_by_step(spans, actor_ranks)]
    marked = [dict(role="actor", rank=-1, state="train", t0=a, t1=b) for a, b in all_training if b > a]
    generating = [s for s in spans if s["state"] == "generate"]
    assert len(marked) >= 12 and overlap_s(generating + marked, "generate", "train", t0, t1) == 0.0


def _train_spans_by_step(spans, ranks):
    """[(rank0's k-th train span, rank1's k-th, ...)] for every step k."""
    per_rank = [sorted((s for s in spans if s["role"] == "actor" and s["rank"] == r
                        and s["state"] == "train"), key=lambda s: s["t0"]) for r in ranks]
    return list(zip(*per_rank))


def test_async_run_killed_and_resumed_trains_no_example_twice_and_every_step_once(tmp_path):
    # FSDP2 over 2 trainer ranks: the checkpoint holds one DCP shard per rank. k = 2: the
    # staleness bound holds for a larger k too. (One trainer rank, k = 1, killed and resumed
    # in streaming mode: test_streaming_exactly_once.)
    run_dir = tmp_path / "async"
    opts = [*LEARNS, "resources.trainer.num_devices=2", "resources.trainer.strategy=fsdp2", "resources.cpu_cores=4",
            "algorithm.max_offpolicy_steps=2", "run.max_steps=14"]
    kill_at_step(run_dir, "trainer", 7, *opts)
    out = train(run_dir, *opts, "run.resume=auto")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "resumed from" in (run_dir / "logs" / "trainer_0.log").read_text()
    lines = trained(run_dir)
    assert [x["step"] for x in lines] == list(range(1, 15))
    assert [m["step"] for m in metrics(run_dir)] == list(range(1, 15))
    assert max(m["trainer/staleness_max"] for m in metrics(run_dir)) <= 2
    # 64 examples, 4 prompts a step: 14 steps stay inside one epoch, so no id may repeat
    # (a dropped stale chunk skips its ids; it never makes any train twice).
    ids = [i for x in lines for i in x["example_ids"]]
    assert len(ids) == 14 * 4 and len(set(ids)) == len(ids)
    assert all(x["policy_version"] == x["step"] for x in lines)
    shards = list((run_dir / "checkpoints" / "step_10" / "trainer").glob("*.distcp"))
    assert len(shards) == 2
