"""A run survives a role that is legitimately busy for longer than any wait's timeout, and
leaves no process behind when a torchrun agent is killed while its worker starts up."""
import json
import os
import signal
import subprocess
import sys
import time

from test_runtime import FAST, metrics, processes_mentioning, train


def test_a_warm_start_longer_than_the_step_timeout_does_not_end_the_run(tmp_path):
    # Before: the trainer posted its rollout receives (and the reward role its chunk
    # receive) before the warm start, and a gloo receive waits at most step_timeout_s.
    run_dir = tmp_path / "slow-start"
    out = train(run_dir, "warmstart.steps=25", "warmstart.batch_size=64", "controller.step_timeout_s=6",
                "run.max_steps=2")
    assert out.returncode == 0, out.stderr[-3000:]
    spans = [json.loads(x) for x in (run_dir / "timeline" / "trainer_0.jsonl").read_text().splitlines()]
    [warm] = [s for s in spans if s["state"] == "warmstart"]
    evals = [s for s in spans if s["state"] == "eval"]
    assert warm["t1"] - warm["t0"] + evals[0]["t1"] - evals[0]["t0"] > 6  # longer than the timeout
    assert [m["step"] for m in metrics(run_dir)] == [1, 2]


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
