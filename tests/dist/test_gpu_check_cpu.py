"""`scripts/gpu_check.py --device cpu`: the GPU check's code at CPU sizes, as a verdict.

The suite runs the sections that hold the GPU paths' logic (FSDP2 train step, the DDMA
transports against a copy, the bf16 μ/π mismatch); the full `--device cpu` run (logits and
generation against transformers, an async run) is run by hand: it must pass in < 3 minutes.
"""
import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.py"
SECTIONS = ("env", "logits_parity", "generation", "fp8", "train_step", "weight_sync", "mismatch", "train")


def _run(tmp_path, *args, timeout=400):
    out = tmp_path / "gpu_check.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--out", str(out), *args],
                          capture_output=True, text=True, timeout=timeout)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads(out.read_text())


def test_gpu_check_on_cpu_gives_every_section_a_verdict_with_its_thresholds(tmp_path):
    proc, result = _run(tmp_path, "--only", "train_step", "weight_sync", "mismatch")
    ran = ("train_step", "weight_sync", "mismatch")
    errors = {k: result[k]["error"] for k in SECTIONS if "error" in result[k]}
    assert not errors, (errors, proc.stdout[-2000:])
    assert result["commit"] and result["command"].startswith("python scripts/gpu_check.py")
    assert {result[k]["verdict"] for k in ("env", "logits_parity", "generation", "fp8", "train")} == {"skip"}
    # Every check of a correctness kind passes. The speed floors (a transport's bytes/s over a
    # copy's) are the GPU's verdict: on a shared 2-core CPU they are numbers, not assertions.
    failed = [f"{n}.{c}" for n in ran for c, ok in result[n]["checks"].items() if not ok]
    assert [c for c in failed if not c.endswith("gbps_over_copy")] == [], (failed, proc.stdout[-2000:])
    # the verdicts and the exit code follow the checks
    assert (proc.returncode, result["verdict"]) == ((1, "fail") if failed else (0, "pass"))
    for name in ran:
        section = result[name]
        assert set(section["thresholds"]) == set(section["checks"]), name
        assert section["verdict"] == ("pass" if all(section["checks"].values()) else "fail"), name
    sync = result["weight_sync"]
    for transport in ("shm", "gloo"):  # each against a copy_ of the same bytes
        assert sync[transport]["received_equal"] and 0 < sync[transport]["gbps"]
        assert sync[transport]["gbps_over_copy"] == round(sync[transport]["gbps"] / sync[transport]["copy_gbps"], 4)
    assert result["train_step"]["tokens_per_s"] > 0 and result["train_step"]["max_weight_change"] > 0
    assert result["mismatch"]["tokens"] > 0 and result["mismatch"]["mean_abs_log_ratio"] < 0.05


def test_a_section_past_its_time_is_killed_and_recorded_and_the_run_exits_non_zero(tmp_path):
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import gpu_check
    finally:
        sys.path.pop(0)
    section = gpu_check._spawn("train_step", "cpu", 0.5, str(tmp_path))  # cannot even import torch in 0.5 s
    assert section["verdict"] == "fail" and "timed out after 0 s (killed)" in section["error"]
    proc, result = _run(tmp_path, "--deadline-s", "1", "--only", "env", timeout=60)
    assert proc.returncode == 1 and result["verdict"] == "fail"
    assert "overall deadline" in result["env"]["error"] and result["train"]["verdict"] == "skip"
