"""`llamarl train` with a tensor-parallel generator (TP = 2 on gloo): one replica of two ranks,
int8 weight-only quantization (so the quantized-vs-full KL probe runs under TP too).

The trainer records the sha256 of each TP slice it sends; each generator
rank records the slice it holds.
"""
import json
import subprocess
import sys
from pathlib import Path

FAST = ["warmstart.steps=0", "run.max_steps=4", "algorithm.prompts_per_step=4", "algorithm.group_size=4",
        "data.num_eval_examples=8", "data.num_train_examples=64", "generation.max_new_tokens=8",
        "run.eval_every_steps=0", "run.max_time_s=0", "resources.generator.max_batch_size=64",
        "resources.trainer.micro_batch_size=16", "run.weight_checksums=true",
        "controller.startup_timeout_s=90", "controller.heartbeat_timeout_s=20",
        "algorithm.weight_decay=0.1", "resources.cpu_cores=4"]


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_tp2_generator_replica_trains_and_each_rank_holds_the_slice_the_trainer_sent(tmp_path):
    run_dir = tmp_path / "tp2"
    cmd = [sys.executable, "-m", "llamarl_cli.main", "train", f"run.dir={run_dir}", *FAST,
           "resources.generator.tp=2", "resources.generator.num_devices=2",
           "resources.generator.quantization=int8"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    plan = json.loads((run_dir / "plan.json").read_text())
    gen = next(r for r in plan["roles"] if r["name"] == "generator")
    assert gen["parallelism"]["tp"] == 2 and gen["parallelism"]["dp"] == 1
    lines = _lines(run_dir / "metrics.jsonl")
    assert [m["policy_version"] for m in lines] == [1, 2, 3, 4]
    # Groups reach the trainer before the chunk's stats are published, so line 1 may precede
    # the first measurement; from step 2 on every line carries it. int8: small but not zero.
    kls = [m["generator/quant_kl"] for m in lines if "generator/quant_kl" in m]
    assert len(kls) >= len(lines) - 1 and all(0 < kl < 1e-2 for kl in kls)

    sums = _lines(run_dir / "weight_checksums.jsonl")
    sent = {(s["version"], s["tp_rank"]): s["sha256"] for s in sums if s["role"] == "trainer"}
    held = {(s["version"], s["tp_rank"]): s["sha256"] for s in sums if s["role"] == "generator"}
    assert set(held) == {(v, r) for v in range(4) for r in range(2)}
    assert all(held[key] == sent[key] for key in held)
    assert sent[0, 0] != sent[0, 1], "the two TP ranks hold different slices"

    # Both ranks of the replica ran the same streams (every async generator streams: the
    # leader broadcasts each chunk start), in lockstep, from chunk 0 on.
    def chunks(rank):
        spans = _lines(run_dir / "timeline" / f"generator_{rank}.jsonl")
        return [(s["chunk"], s["version"], s.get("streaming")) for s in spans if s["state"] == "generate"]
    assert chunks(0) == chunks(1) and chunks(0)[0][0] == 0
    assert all(streaming for _, _, streaming in chunks(0))
