"""A real `llamarl bench sync-vs-async` (1 step per mode) with no --out and no --work-dir:
its JSON lands in ./runs/bench/sync_vs_async-<time>/, and it leaves nothing in TMPDIR (it used
to leave its run directories, 29 MB of checkpoints and torchrun's folders in /tmp)."""
import json
import os
import subprocess
import sys


def test_a_tiny_bench_writes_its_json_into_its_work_dir_and_nothing_into_tmpdir(tmp_path):
    tmp, cwd = tmp_path / "tmp", tmp_path / "cwd"
    tmp.mkdir()
    cwd.mkdir()
    cmd = [sys.executable, "-m", "llamarl_cli.main", "bench", "sync-vs-async", "--steps", "1",
           "--repeats", "1", "recipe=cpu_tiny", "warmstart.steps=2", "data.num_eval_examples=8",
           "run.eval_every_steps=1", "controller.startup_timeout_s=90"]
    out = subprocess.run(cmd, cwd=cwd, env={**os.environ, "TMPDIR": str(tmp)}, capture_output=True,
                         text=True, timeout=400)
    assert out.returncode == 0, out.stderr[-3000:]
    (work,) = (cwd / "runs" / "bench").iterdir()
    assert f"wrote {work / 'sync_vs_async.json'}" in out.stdout
    kept = sorted(p.name for p in work.iterdir())
    assert "sync_vs_async.json" in kept and all(not (work / name).is_dir() for name in kept), kept
    assert json.loads((work / "sync_vs_async.json").read_text())["benchmark"] == "sync_vs_async"
    assert list(tmp.iterdir()) == []
