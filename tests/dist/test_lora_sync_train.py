"""`llamarl train model.lora.rank=4` end to end on the tiny preset: async, the generator builds its
own base and only the adapters travel, so every sync's `sync/bytes` is the adapter bytes worked
out by hand (tests/unit/test_lora_sync_plan.py: 58,560 float32 values = 234,240 B, against
10,025,984 B of full weights), and the adapters each version hashes to on the generator are the
ones the trainer sent; sync mode (k = 0, the colocated actor) trains LoRA too."""
import json
import subprocess
import sys

import pytest

ADAPTER_BYTES = 58_560 * 4
FAST = ["model.lora.rank=4", "warmstart.steps=0", "run.max_steps=3", "algorithm.prompts_per_step=2",
        "algorithm.group_size=2", "algorithm.entropy_coef=0.01", "data.num_train_examples=8",
        "data.num_eval_examples=2",
        "generation.max_new_tokens=4", "run.eval_every_steps=0", "run.max_time_s=0",
        "logging.tensorboard=false", "controller.startup_timeout_s=90", "controller.heartbeat_timeout_s=20"]


def _train(run_dir, *overrides):
    out = subprocess.run([sys.executable, "-m", "llamarl_cli.main", "train", f"run.dir={run_dir}", *FAST,
                          *overrides], capture_output=True, text=True, timeout=300)
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2, 3], out.stdout[-2000:] + out.stderr[-3000:]
    return out, lines


def _finished(out) -> None:
    """Every step ran (above), and the run ended cleanly: its last act writes checkpoints/final merged."""
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]


def test_an_async_lora_run_syncs_only_the_adapters(tmp_path):
    out, lines = _train(tmp_path / "run", "run.weight_checksums=true", "algorithm.max_offpolicy_steps=1")
    synced = [m["sync/bytes"] for m in lines if "sync/bytes" in m]
    assert synced and all(b == ADAPTER_BYTES for b in synced), synced
    sums = [json.loads(x) for x in (tmp_path / "run" / "weight_checksums.jsonl").read_text().splitlines()]
    sent = {s["version"]: s["sha256"] for s in sums if s["role"] == "trainer"}
    held = [s for s in sums if s["role"] == "generator"]
    versions = {s["version"] for s in held}
    assert 0 in versions and versions & {1, 2}, versions  # version 0 and one past it (a merge from the base)
    assert all(sent[s["version"]] == s["sha256"] for s in held)
    assert sent[0] != sent[1]  # step 1 moved the adapters (an entropy bonus: a gradient at reward 0)
    _finished(out)


def test_a_sync_mode_lora_run_trains(tmp_path):
    out, lines = _train(tmp_path / "run", "algorithm.max_offpolicy_steps=0")
    assert all("sync/bytes" not in m for m in lines)  # the actor's engine shares the trained module
    _finished(out)
