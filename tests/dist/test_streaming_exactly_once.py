"""Streaming mode (executors/stream.py) keeps exactly-once accounting: a generator SIGKILLed
mid-run is restarted (its in-flight chunks, which may span two steps, are generated again), then
the trainer is SIGKILLed and the run resumed from its step-5 checkpoint; across both, every step
trains once and no prompt is trained twice or lost: the prompts trained are exactly those of the
first 14 chunks, step n on chunk n - 1's (the trainer takes each replica's chunks in order,
executors/intake.py), and no row is older than k (executors/admission.py): nothing is dropped."""
import json
import os
import signal
import subprocess
import sys
import time

from llamarl_core.executors.setup import chunk_prompt_indices
from test_restarts import pids_in_log
from test_resume import trained, worker_pid
from test_runtime import FAST, metrics, processes_mentioning, train

STREAMING = ["algorithm.max_offpolicy_steps=1", "run.max_steps=14",
             "run.checkpoint_every_steps=5", "run.weight_checksums=false"]


def test_a_streaming_run_through_a_generator_restart_and_a_resume_trains_each_prompt_once(tmp_path):
    run_dir = tmp_path / "streamed"
    cmd = [sys.executable, "-m", "llamarl_cli.main", "train", f"run.dir={run_dir}", *FAST, *STREAMING]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline, gen_killed, trainer_killed = time.time() + 200, None, False
    while time.time() < deadline and proc.poll() is None and not trainer_killed:
        done = len(metrics(run_dir)) if (run_dir / "metrics.jsonl").exists() else 0
        if gen_killed is None and done >= 3:
            gen_killed = pids_in_log(run_dir / "logs" / "generator_0.log")[0]
            os.kill(gen_killed, signal.SIGKILL)
        elif gen_killed is not None and done >= 7:
            os.kill(worker_pid(run_dir, "trainer"), signal.SIGKILL)
            trainer_killed = True
        time.sleep(0.02)
    assert gen_killed is not None and trainer_killed, "the run never reached step 7"
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 1 and "restart generator #1" in out + err, (out + err)[-3000:]
    time.sleep(0.5)
    assert processes_mentioning(str(run_dir)) == []
    assert len(pids_in_log(run_dir / "logs" / "generator_0.log")) == 2  # it was restarted once

    out = train(run_dir, *STREAMING, "run.resume=auto", timeout_s=240)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = trained(run_dir)
    assert [x["step"] for x in lines] == list(range(1, 15))  # each step once, resumed at 6
    # 64 examples, 4 prompts a step: 14 steps stay inside one epoch, so no id may repeat
    ids = [i for x in lines for i in x["example_ids"]]
    assert len(ids) == 14 * 4 and len(set(ids)) == len(ids)
    assert sorted(ids) == sorted(i for n in range(14) for i in chunk_prompt_indices(64, n, 4, 0))  # none lost
    # in order: step n trains chunk n - 1, whatever the restarts and the stream's arrival order
    assert all(sorted(x["example_ids"]) == sorted(chunk_prompt_indices(64, x["step"] - 1, 4, 0)) for x in lines)
    spans = [json.loads(x) for x in (run_dir / "timeline" / "generator_0.jsonl").read_text().splitlines()]
    streamed = [s for s in spans if s["state"] == "generate" and s.get("streaming")]
    assert streamed
    # a stream's span is cut at each chunk's end (Timeline.split): segments that meet exactly,
    # so its busy time reaches the metrics while it streams
    assert any(a["t1"] == b["t0"] for a, b in zip(streamed, streamed[1:]))
    m = metrics(run_dir)
    assert all(0.0 <= x["pipeline/both_idle_frac"] <= 1.0 for x in m if "pipeline/both_idle_frac" in x)
    assert any("pipeline/both_idle_frac" in x for x in m)
    assert all("trainer/duplicate_dropped_groups" in x and "trainer/stale_dropped_groups" not in x for x in m)
    # what was trained kept the bound: every row's oldest token within k = 1 versions
    assert all(x["trainer/staleness_max"] <= 1 for x in m)
