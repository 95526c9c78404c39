"""A generator (or reward) group that dies is restarted and the run goes on
(docs/ARCHITECTURE.md, "Restart protocol"), end to end on gloo: a new generator receives the
trainer's current weights before it generates, the prompts the dead rank held are generated
again, and no example is lost or trained twice. (A death with controller.max_restarts=0 ending the run is
test_runtime.py's; the trainer's death ending it with no orphan, test_resume.py's.)"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llamarl_core.executors.setup import chunk_prompt_indices
from test_runtime import FAST, metrics, processes_mentioning


def pids_in_log(log: Path) -> list[int]:
    """Every pid the rank's log announced, one per start ("... pid N threads T")."""
    return [int(line.split(" pid ")[1].split()[0]) for line in log.read_text().splitlines()
            if " pid " in line and "(global " in line]


@pytest.mark.parametrize("roles,k", [(("generator", "reward"), 1), (("reward",), 0)], ids=["async", "sync"])
def test_a_sigkilled_role_is_restarted_and_the_run_trains_every_example_once(tmp_path, roles, k):
    # async: the generator is killed at step 3, then the reward rank at step 7, in one run (two
    # restarts of two roles); sync (k = 0, no generator role): the reward rank at step 3.
    run_dir = tmp_path / "restarted"
    steps = 12  # 12 steps x 4 prompts of 64 examples: one epoch, so no id may repeat
    cmd = [sys.executable, "-m", "llamarl_cli.main", "train", f"run.dir={run_dir}", *FAST,
           f"run.max_steps={steps}", f"algorithm.max_offpolicy_steps={k}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    logs = {role: run_dir / "logs" / f"{role}_0.log" for role in roles}
    deadline, killed = time.time() + 200, {}
    while time.time() < deadline and proc.poll() is None and len(killed) < len(roles):
        role = roles[len(killed)]
        if (run_dir / "metrics.jsonl").exists() and len(metrics(run_dir)) >= 3 + 4 * len(killed):
            killed[role] = pids_in_log(logs[role])[0]
            os.kill(killed[role], signal.SIGKILL)
        time.sleep(0.05)
    assert len(killed) == len(roles), f"the run never reached step {3 + 4 * len(killed)}"
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, (out + err)[-3000:]
    lines = metrics(run_dir)
    assert [m["step"] for m in lines] == list(range(1, steps + 1))
    for role in roles:
        assert f"restart {role} #1" in out + err
        assert lines[-1][f"restarts/{role}"] == 1 and lines[0][f"restarts/{role}"] == 0
        pids = pids_in_log(logs[role])
        assert len(pids) == 2 and pids[0] == killed[role]  # started once more, as a new process
    trained = [json.loads(x) for x in (run_dir / "trained_examples.jsonl").read_text().splitlines()]
    ids = [i for x in trained for i in x["example_ids"]]
    assert len(ids) == steps * 4 and len(set(ids)) == len(ids)  # none repeated
    assert sorted(ids) == sorted(i for n in range(steps) for i in chunk_prompt_indices(64, n, 4, 0))  # none lost
    if k:  # every version a generator process held hashes like the trainer's weights at send,
        # every published version reached a generator, and a new generator started from the
        # trainer's current weights (version 0 was received once: by the first process only)
        sums = [json.loads(x) for x in (run_dir / "weight_checksums.jsonl").read_text().splitlines()]
        sent = {s["version"]: s["sha256"] for s in sums if s["role"] == "trainer"}
        got = [s for s in sums if s["role"] == "generator"]
        assert all(s["sha256"] == sent[s["version"]] for s in got)
        versions = [s["version"] for s in got]
        held = sorted(set(versions))
        assert held[0] == 0 and versions.count(0) == 1 and held[-1] == steps - 1
        # A streaming generator runs ahead of the trainer, so the trainer may publish a version
        # or two from rows already streamed while no generator process is alive; those are
        # skipped (the new one starts from the current weights), nothing else is.
        missing = sorted(set(range(steps)) - set(held))
        assert len(missing) <= 2 and missing == list(range(missing[0], missing[0] + len(missing))) if missing \
            else True, missing
    time.sleep(0.5)
    assert processes_mentioning(str(run_dir)) == []
