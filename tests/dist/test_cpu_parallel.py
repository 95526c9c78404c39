"""`llamarl train recipe=cpu_parallel` for real: generator TP = 2 and an FSDP2 trainer with
activation checkpointing on gloo; every synced version hashes equal slice by slice.

Run with 4 trainer ranks and fsdp=2: HSDP (2 replicas of a 2-way shard), the layout of
recipes 8b_gsm8k and 405b_math. Before the fix the DDMA plan read trainer rank t's rows as
`fsdp_rows(rows, 4, t)` while FSDP2 holds `fsdp_rows(rows, 2, t % 2)`: the run ended
normally with every generator slice different from the trainer's, version 0 included. The
2-rank FSDP layout of the recipe as shipped is the plan's default case (tests/dist/test_ddma.py)."""
import json
import subprocess
import sys


def test_cpu_parallel_recipe_under_hsdp_trains_and_every_slice_checksum_matches(tmp_path):
    run_dir = tmp_path / "run"
    out = subprocess.run([sys.executable, "-m", "llamarl_cli.main", "train", "recipe=cpu_parallel",
                          "resources.trainer.num_devices=4", "resources.trainer.fsdp=2",
                          f"run.dir={run_dir}"], capture_output=True, text=True, timeout=400)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    plan = json.loads((run_dir / "plan.json").read_text())
    trainer = next(r for r in plan["roles"] if r["name"] == "trainer")
    generator = next(r for r in plan["roles"] if r["name"] == "generator")
    assert trainer["parallelism"]["fsdp"] == 2 and trainer["parallelism"]["dp"] == 2
    assert generator["parallelism"]["tp"] == 2
    steps = [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]
    lines = [json.loads(x) for x in (run_dir / "weight_checksums.jsonl").read_text().splitlines()]
    sent = {(x["version"], x["tp_rank"]): x["sha256"] for x in lines if x["role"] == "trainer"}
    held = [x for x in lines if x["role"] == "generator"]
    assert {x["version"] for x in held} == {0, 1, 2, 3}  # every sync, both TP ranks
    assert {x["tp_rank"] for x in held} == {0, 1}
    assert all(sent[(x["version"], x["tp_rank"])] == x["sha256"] for x in held)
    assert len({x["sha256"] for x in held if x["version"] == 0}) == 2  # the slices differ
    # The final HF export was streamed from the FSDP2 shards (one gathered tensor at a time).
    from llamarl_core.models import load_pretrained
    model, _ = load_pretrained(run_dir / "checkpoints" / "final")
    assert all(bool(p.isfinite().all()) for p in model.parameters())
    assert model.args.dim == 256
