"""Recipe → scale-simulator inputs, and `llamarl bench --simulate` / usage errors on the CLI."""
import json
import re

import pytest

from llamarl_cli.main import main
from llamarl_core.sim.adapter import sim_inputs_from_config, simulate_config
from llamarl_core.config.load import load_config
from llamarl_core.config.hardware import get_device
from llamarl_core.plan.model_source import resolve_model_args


def inputs_for(recipe, *overrides):
    cfg = load_config(recipe, list(overrides))
    model, _ = resolve_model_args(cfg.model)
    return sim_inputs_from_config(cfg, model, get_device(cfg.resources.device))


def test_8b_recipe_maps_its_split_and_workload_into_the_simulator_inputs():
    inp = inputs_for("8b_gsm8k")
    expected = dict(generator_devices=128, generator_tp=1, generator_bytes_per_param=2.0,
                    trainer_devices=128, trainer_fsdp=8, trainer_tp=1, prompts_per_step=256,
                    group_size=8, batching="continuous", wire_bytes_per_param=2.0)
    for key, value in expected.items():  # recipes/8b_gsm8k.yaml, read by hand
        assert getattr(inp, key) == value, key
    assert inp.prompt_tokens == 384          # generation.max_prompt_tokens
    assert inp.new_tokens == 800             # max_new_tokens 2400 / max_to_mean_new_tokens 3.0
    assert inp.max_offpolicy_steps == 1


def test_fp8_generator_counts_one_byte_per_weight_and_fsdp_0_resolves_to_all_dp_ranks():
    inp = inputs_for("70b_gsm8k")
    assert inp.generator_bytes_per_param == 1.0 and inp.generator_tp == 4
    assert inp.trainer_fsdp == 128            # fsdp: 0 over 128 devices, tp 1, dp 1
    assert inputs_for("70b_gsm8k", "resources.generator.quantization=none",
                      "resources.generator.dtype=float32").generator_bytes_per_param == 4.0


def test_simulate_config_returns_step_times_and_the_error_when_it_cannot_model_the_layout():
    cfg = load_config("8b_gsm8k")
    model, _ = resolve_model_args(cfg.model)
    result = simulate_config(cfg, model, get_device("h100-80gb"))
    assert result["sync"]["step_s"] > result["async"]["step_s"] > 0
    assert result["speedup"] == result["sync"]["step_s"] / result["async"]["step_s"]
    cfg = load_config("8b_gsm8k", ["resources.generator.pp=2"])
    bad = simulate_config(cfg, model, get_device("h100-80gb"))
    assert bad["sync"]["step_s"] is None and "pipeline" in bad["error"]


def test_bench_simulate_writes_the_recipes_prediction_beside_the_papers(tmp_path, capsys):
    out = tmp_path / "sim.json"
    assert main(["bench", "sync-vs-async", "--simulate", "recipe=8b_gsm8k", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["sync"]["step_s"] > 0 and d["async"]["step_s"] > 0
    assert d["published"]["sync"] == 22.45 and d["published"]["async"] == 8.90
    assert [row["case"] for row in d["calibration"]] == ["8b", "70b", "405b"]
    assert "22.45" in capsys.readouterr().out
    # it says what produced it: the command as typed and the commit it ran
    assert d["command"] == f"llamarl bench sync-vs-async --simulate recipe=8b_gsm8k --out {out}"
    assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?|unknown \(not a git checkout\)", d["commit"])


@pytest.mark.parametrize("argv, words", [
    (["bench", "--sync-vs-async"], ["unknown benchmark '--sync-vs-async'", "sync-vs-async, quality"]),
    (["bench", "sync-vs-async", "--simulate", "recipe=cpu_tiny", "--measured", "/nonexistent.json"],
     ["--measured", "no such file"]),
    (["bench", "sync-vs-async", "--steps", "0"], ["--steps=0"]),
    (["bench", "sync-vs-async", "--layout", "1:1"], ["llamarl bench sync-vs-async", "unknown option(s) --layout"]),
])
def test_bench_bad_input_exits_2_with_one_line(capsys, argv, words):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    for w in words:
        assert w in err


def test_static_batching_makes_both_modes_wait_for_each_batchs_longest_sample():
    from dataclasses import replace

    from llamarl_core.sim.simulator import simulate
    results = {}
    for batching in ("continuous", "static"):
        # 8 slots for 16 samples per replica: continuous refills them, static runs 2 full waves
        inp = inputs_for("8b_gsm8k", f"generation.batching={batching}", "resources.generator.max_batch_size=8")
        assert (inp.max_batch_size, inp.streaming) == (8, True)  # every async generator streams
        results[batching] = simulate(inp)
        if batching == "continuous":  # the what-if of a chunked async generator (no longer built)
            results["chunked"] = simulate(replace(inp, streaming=False))
    # async: 16 samples per replica (mean 800, longest 2400) in 8 slots:
    # chunked 16 * 800 / 8 + (2400 - 800) = 3200 steps; static 2 waves x 2400 = 4800;
    # streaming (the next step's prompts fill the tail's slots) 16 * 800 / 8 = 1600
    assert results["chunked"]["async"]["decode_steps"] == 3200
    assert results["continuous"]["async"]["decode_steps"] == 1600
    assert results["static"]["async"]["decode_steps"] == 4800
    assert results["static"]["async"]["step_s"] > results["chunked"]["async"]["step_s"]
    # sync: 8 samples per replica fill its 8 slots once: one wave either way
    assert results["static"]["sync"]["decode_steps"] == results["continuous"]["sync"]["decode_steps"] == 2400
