"""`scripts/gpu_check.py --device cpu`: the GPU check's code, run at CPU sizes, end to end."""
import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.py"


def test_gpu_check_on_cpu_runs_every_section_and_writes_its_json(tmp_path):
    out = tmp_path / "gpu_check.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--out", str(out)],
                          capture_output=True, text=True, timeout=400)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    errors = {k: v.get("error") for k, v in result.items() if isinstance(v, dict) and v.get("ok") is False}
    assert proc.returncode == 0 and not errors, errors
    for name in ("env", "logits_parity", "generation", "fp8", "weight_sync", "train"):
        assert result[name]["ok"] is True, (name, result[name])
    assert result["logits_parity"]["argmax_agreement"] == 1.0
    assert result["logits_parity"]["max_abs_diff"] < 1e-4  # fp32: same weights, same function
    assert result["generation"]["engine_tokens_per_s"] > 0 and result["generation"]["transformers_tokens_per_s"] > 0
    assert result["fp8"]["available"] is False  # CPU: reported, not faked
    assert result["weight_sync"]["transport"] == "shm" and result["weight_sync"]["received_equal"] is True
    assert result["train"]["steps"] == 2 and result["train"]["checksums_equal"] is True
