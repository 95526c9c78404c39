"""`llamarl train` says why a run ended, end to end on gloo: the time limit (the trainer decides)
and SIGTERM (the controller decides), each as summary.json's `end_reason` and as the last line
printed when there is no terminal."""
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from test_runtime import FAST

BASE = [o for o in FAST if not o.startswith(("run.max_time_s=", "run.max_steps="))]


def _cmd(run_dir: Path, *overrides: str) -> list[str]:
    return [sys.executable, "-m", "llamarl_cli.main", "train", f"run.dir={run_dir}", *BASE, *overrides]


def test_a_run_stopped_by_its_time_limit_says_so_in_summary_json_and_its_last_line(tmp_path):
    out = subprocess.run(_cmd(tmp_path / "run", "run.max_steps=100000", "run.max_time_s=3"),
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    steps = summary["steps"]
    assert 0 < steps < 100000
    assert summary["end_reason"] == "max_time_s"
    assert summary["end_detail"] == f"run.max_time_s=3 reached after {steps} of 100000 steps"
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    closing = lines[-5:]  # run ended, held-out accuracy, done: and its run dir (a long path wraps onto its own line)
    assert f"run ended: run.max_time_s=3 reached after {steps} of 100000 steps" in closing, lines[-6:]


def test_a_run_stopped_by_sigterm_says_so_in_summary_json_and_its_last_line(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(_cmd(run_dir, "run.max_steps=100000", "run.max_time_s=0"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 180
        while time.time() < deadline and not (run_dir / "metrics.jsonl").exists():
            time.sleep(0.5)
        assert (run_dir / "metrics.jsonl").exists(), "no step within 180 s"
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary == {"end_reason": "signal", "end_detail": "stopped by SIGTERM"}
    assert [line for line in stdout.splitlines() if line.strip()][-1] == "run ended: stopped by SIGTERM"
