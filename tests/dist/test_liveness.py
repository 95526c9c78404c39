"""A run survives a role that is legitimately busy for longer than any wait's timeout, and
leaves no process behind when a torchrun agent is killed while its worker starts up. The long
warm start's checkpoint also starts a second run (`model.checkpoint`): its version 0 is those
weights, bit for bit."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from test_runtime import FAST, metrics, processes_mentioning, train


@pytest.fixture(scope="module")
def slow_start(tmp_path_factory):
    """A run whose warm start (25 steps of batch 64) outlasts its 6 s step timeout."""
    run_dir = tmp_path_factory.mktemp("liveness") / "slow-start"
    out = train(run_dir, "warmstart.steps=25", "warmstart.batch_size=64", "controller.step_timeout_s=6",
                "run.max_steps=2")
    assert out.returncode == 0, out.stderr[-3000:]
    return run_dir


def test_a_warm_start_longer_than_the_step_timeout_does_not_end_the_run(slow_start):
    # Before: the trainer posted its rollout receives (and the reward role its chunk
    # receive) before the warm start, and a gloo receive waits at most step_timeout_s.
    spans = [json.loads(x) for x in (slow_start / "timeline" / "trainer_0.jsonl").read_text().splitlines()]
    [warm] = [s for s in spans if s["state"] == "warmstart"]
    evals = [s for s in spans if s["state"] == "eval"]
    assert warm["t1"] - warm["t0"] + evals[0]["t1"] - evals[0]["t0"] > 6  # longer than the timeout
    assert [m["step"] for m in metrics(slow_start)] == [1, 2]


def test_rl_starts_from_a_saved_warm_start_with_exactly_its_weights(slow_start, tmp_path):
    checkpoint = slow_start / "checkpoints" / "warmstart"
    assert (checkpoint / "config.json").exists()
    second = tmp_path / "from_checkpoint"
    out = train(second, f"model.checkpoint={checkpoint}", "run.max_steps=1")
    assert out.returncode == 0, out.stderr[-3000:]

    def version_0(run_dir):
        sums = [json.loads(x) for x in (run_dir / "weight_checksums.jsonl").read_text().splitlines()]
        return {s["sha256"] for s in sums if s["version"] == 0}
    # version 0 of both runs (trainer and generator) is the warm-started model, bit for bit
    assert len(version_0(slow_start)) == 1 and version_0(slow_start) == version_0(second)


def agent_pid(run_dir, role: str) -> int | None:
    for pid in processes_mentioning(f"plan={run_dir}/plan.json"):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
        except OSError:
            continue
        # the agent is `torchrun …` or `python -m torch.distributed.run …` (no script beside python)
        if f"role={role}" in cmd and ("torch.distributed.run" in cmd or "torchrun" in cmd):
            return pid
    return None


def test_sigkill_of_the_generators_torchrun_agent_at_start_up_leaves_no_process(tmp_path):
    run_dir = tmp_path / "agent-killed"
    cmd = [sys.executable, "-m", "llamarl_cli.main", "train", f"run.dir={run_dir}", *FAST,
           "run.max_steps=100000", "controller.max_restarts=0"]  # restarts off: a death ends the run
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline, pid = time.time() + 60, None
    while time.time() < deadline and pid is None:
        pid = agent_pid(run_dir, "generator")
        time.sleep(0.1)
    assert pid is not None, "the generator's torchrun agent never appeared"
    time.sleep(5)  # its worker is importing torch or joining the group: no pid registered yet
    os.kill(pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 1 and "generator" in err, err[-2000:]
    time.sleep(1)
    assert processes_mentioning(str(run_dir)) == []
