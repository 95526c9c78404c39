"""bench/lora_side_by_side.py: the full-vs-LoRA JSON assembled from two run directories written
by hand (timelines, metrics, summary, peak RSS), every compared number derived in comments."""
import json
from pathlib import Path

import pytest

from llamarl_cli import bench_cmd
from llamarl_core.bench.lora_side_by_side import assemble, run_summary


def _fake_run(root: Path, name: str, train_s: float, acc_after: float, trainer_gib: float,
              sync_bytes: int, sync_seconds: tuple, planned_bytes: int) -> Path:
    """Trainer: eval [0, 1] (version 0), then steps training [1, 1+train_s] and [5, 5+train_s];
    generator: generate [1, 4.5], wait [4.5, 5], generate [5, 8]."""
    run = root / name
    (run / "timeline").mkdir(parents=True)
    trainer = [("eval", 0, 1, {"version": 0}), ("train", 1, 1 + train_s, {"step": 1}),
               ("wait", 1 + train_s, 5, {}), ("train", 5, 5 + train_s, {"step": 2})]
    generator = [("generate", 1, 4.5, {}), ("wait", 4.5, 5, {}), ("generate", 5, 8, {})]
    for role, spans in (("trainer", trainer), ("generator", generator)):
        with open(run / "timeline" / f"{role}_0.jsonl", "w") as f:
            for state, t0, t1, extra in spans:
                f.write(json.dumps({"role": role, "rank": 0, "state": state, "t0": t0, "t1": t1, **extra}) + "\n")
    (run / "plan.json").write_text(json.dumps({"weight_sync": {"bytes_per_version": planned_bytes}}))
    (run / "config.yaml").write_text(f"recipe: {name}\n")
    metrics = [{"step": s, "generator/tokens": 100 * s, "trainer/completion_tokens": 50, "generator/tokens_per_s": 40.0,
                "trainer/tokens_per_s": 80.0, "trainer/staleness_max": 1, "reward/mean": 0.2,
                "sync/bytes": sync_bytes, "sync/seconds": sec} for s, sec in ((1, sync_seconds[0]), (2, sync_seconds[1]))]
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    (run / "summary.json").write_text(json.dumps({"recipe": name, "mode": "async", "accuracy_before": 0.2,
                                                  "accuracy_after": acc_after, "steps": 2,
                                                  "accuracy_by_version": {"0": 0.2}}))
    (run / "peak_rss.json").write_text(json.dumps({"peak_rss_gib": {"trainer": trainer_gib, "generator": 1.8}}))
    return run


def test_the_side_by_side_json_compares_two_runs_by_hand_derived_ratios(tmp_path):
    full = run_summary(_fake_run(tmp_path, "smollm2_cpu", 3.0, 0.35, 4.0, 540_000_000, (0.1, 0.3), 540_000_000),
                        "llamarl train a")
    lora = run_summary(_fake_run(tmp_path, "smollm2_lora_cpu", 2.0, 0.30, 1.0, 5_400_000, (0.01, 0.01), 5_000_000),
                       "llamarl train b")
    out = assemble(full, lora, max_time_s=900.0)
    c = out["comparison"]
    # gains: 35 - 20 = 15 points (full), 30 - 20 = 10 (LoRA)
    assert c["accuracy_gain_points"] == {"full": 15.0, "lora": 10.0, "lora_minus_full": -5.0}
    # train seconds per step: windows [1, 1+t] and [1+t, 5+t] each hold one train span of t seconds
    assert c["trainer_train_s_per_step"]["full"] == pytest.approx(3.0)
    assert c["trainer_train_s_per_step"]["ratio"] == pytest.approx(2.0 / 3.0)
    assert c["trainer_peak_rss_gib"]["ratio"] == pytest.approx(0.25)                    # 1.0 / 4.0 GiB
    assert c["sync_bytes_per_sync"]["ratio"] == pytest.approx(0.01)                      # 5.4 MB / 540 MB
    assert c["sync_seconds_per_sync"]["full"] == pytest.approx(0.2)                      # median of 0.1, 0.3
    assert c["sync_bytes_vs_planned"] == pytest.approx({"full": 1.0, "lora": 1.08})     # 5.4 MB moved / 5.0 MB planned
    # RL window [1, 5+t] (after the version-0 eval, to the last train's end): full 7 s, LoRA 6 s;
    # the trainer is busy 2t of it (6/7, 4/6)
    assert c["busy_share"]["full"]["trainer"] == pytest.approx(6 / 7)
    assert c["busy_share"]["lora"]["trainer"] == pytest.approx(4 / 6)
    # generator busy within [1, 7] for LoRA: 3.5 + 2 = 5.5 s of 6
    assert c["busy_share"]["lora"]["generator"] == pytest.approx(5.5 / 6)
    assert out["runs"]["lora"]["sync"]["syncs"] == 2 and c["rl_steps"] == {"full": 2, "lora": 2}
    json.dumps(out)  # the bench writes it as it is


def test_bench_lora_is_registered_and_passes_overrides_to_both_runs():
    args = bench_cmd.parser("lora").parse_args(["--max-time-s", "60", "run.seed=3", "data.digits=2"])
    assert args.max_time_s == 60.0 and args.overrides == ["run.seed=3", "data.digits=2"]
    assert bench_cmd.parser("lora-apply").parse_args([]).rank == 16
    assert bench_cmd.parser("lora-trainer").parse_args([]).repeats == 3
    assert bench_cmd.parser("lora").parse_args(["--runs", "runs/bench/x"]).runs == "runs/bench/x"
