"""The quality bench's per-run and per-configuration numbers, checked on a hand-made run."""
import json
import os

import pytest

from llamarl_core.bench.quality import (CONFIGS, aggregate_config, config_overrides,
                                        quality_run_stats)
from llamarl_core.bench.quality_plots import plot_curves, plot_staleness
from llamarl_core.config.load import load_config


def span(role, state, t0, t1, **kw):
    return {"role": role, "rank": 0, "state": state, "t0": t0, "t1": t1, **kw}


def write_run(run_dir, staleness, ratios_max, accuracy_by_version):
    os.makedirs(os.path.join(run_dir, "timeline"))
    spans = [span("trainer", "eval", 0, 1, version=0)]
    t = 1
    for v in range(1, len(staleness) + 1):
        spans.append(span("trainer", "train", t, t + 2))
        t += 2
        if str(v) in accuracy_by_version:
            spans.append(span("trainer", "eval", t, t + 1, version=v))
            t += 1
    with open(os.path.join(run_dir, "timeline", "trainer_0.jsonl"), "w") as f:
        f.writelines(json.dumps(s) + "\n" for s in spans)
    with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
        for i, (s, r) in enumerate(zip(staleness, ratios_max)):
            f.write(json.dumps({"step": i + 1, "reward/mean": 0.1 * i, "trainer/staleness_mean": s,
                                "trainer/is_ratio_mean": 1.0 + 0.1 * i, "trainer/is_ratio_max": r,
                                "trainer/ess": 0.9, "trainer/is_truncated_frac": 0.01 * i,
                                "trainer/ppo_clip_frac": 0.0}) + "\n")
    versions = sorted(accuracy_by_version, key=int)
    with open(os.path.join(run_dir, "summary.json"), "w") as f:
        json.dump({"accuracy_by_version": accuracy_by_version, "rl_wall_s": t - 1,
                   "accuracy_before": accuracy_by_version["0"],
                   "accuracy_after": accuracy_by_version[versions[-1]]}, f)


def test_a_run_reports_its_curve_in_samples_staleness_histogram_and_ratio_extremes(tmp_path):
    run = str(tmp_path / "run")
    write_run(run, staleness=[0, 1, 2, 2], ratios_max=[1.0, 1.5, 3.0, 2.0],
              accuracy_by_version={"0": 0.2, "2": 0.3, "4": 0.5})
    stats = quality_run_stats(run, samples_per_step=128)
    assert stats["final_accuracy"] == 0.5 and stats["accuracy_before"] == 0.2
    assert [p["samples"] for p in stats["curve"]] == [0, 256, 512]
    # RL starts when the first eval ends (t=1); an eval point is stamped when its eval ends
    assert [p["wall_s"] for p in stats["curve"]] == [0.0, 5, 10]
    assert stats["staleness_histogram"] == {"0": 1, "1": 1, "2": 2}
    assert stats["is_ratio_max"] == 3.0
    assert stats["is_ratio_mean"] == pytest.approx((1.0 + 1.1 + 1.2 + 1.3) / 4)
    assert stats["truncated_fraction"] == pytest.approx(0.015)


def test_a_configuration_reports_mean_and_sample_sd_over_seeds(tmp_path):
    runs = []
    for i, final in enumerate((0.4, 0.5, 0.6)):
        run = str(tmp_path / f"seed{i}")
        write_run(run, [4, 4], [2.0, 5.0 + i], {"0": 0.2, "2": final})
        runs.append(quality_run_stats(run, 64))
    c = aggregate_config("async_k4_aipo", 4, "aipo", [0, 1, 2], runs)
    assert c["final_accuracy"] == [0.4, 0.5, 0.6]
    assert c["final_accuracy_mean"] == pytest.approx(0.5)
    assert c["final_accuracy_sd"] == pytest.approx(0.1)  # sample sd of 0.4, 0.5, 0.6
    assert c["staleness_histogram"] == {"4": 6} and c["is_ratio_max"] == 7.0
    result = {"recipe": "cpu_tiny", "warmstart_accuracy": 0.2, "configs": [c]}
    for plot, name in ((plot_curves, "curves.png"), (plot_staleness, "staleness.png")):
        assert os.path.getsize(plot(result, str(tmp_path / name))) > 1000


@pytest.mark.parametrize("name,k,correction", CONFIGS)
def test_each_configuration_is_a_valid_run_from_the_shared_checkpoint(name, k, correction):
    cfg = load_config("cpu_tiny", config_overrides(k, correction, 24, 5, "/tmp/ws", "/tmp/run"))
    assert cfg.model.checkpoint == "/tmp/ws" and cfg.warmstart.steps == 0 and cfg.run.seed == 5
    assert cfg.algorithm.max_offpolicy_steps == k and cfg.data.seed == 0
    assert cfg.algorithm.name == {"aipo": "aipo", "none": "pg", "ppo_clip": "ppo"}[correction]


def test_select_configs_keeps_order_and_refuses_unknown_names():
    from llamarl_core.bench.quality import select_configs
    assert select_configs(None) == CONFIGS
    assert [n for n, _, _ in select_configs(["streaming_k2", "sync_k0"])] == ["sync_k0", "streaming_k2"]
    with pytest.raises(ValueError, match="async_k9"):
        select_configs(["sync_k0", "async_k9"])


def test_bench_cli_refuses_an_unknown_quality_config_before_running(capsys):
    from llamarl_cli.bench_cmd import main
    assert main(["quality", "--configs", "sync_k0,nope"]) == 2
    assert "nope" in capsys.readouterr().err
