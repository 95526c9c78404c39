"""Recipe → scale-simulator inputs, and `llamarl bench --simulate` / usage errors on the CLI."""
import json

import pytest

from llamarl_cli.main import main
from llamarl_core.sim.adapter import sim_inputs_from_config, simulate_config
from llamarl_core.sim.simulator import CASES
from llamarl_core.config.load import load_config
from llamarl_core.config.hardware import get_device
from llamarl_core.plan.model_source import resolve_model_args


def inputs_for(recipe, *overrides):
    cfg = load_config(recipe, list(overrides))
    model, _ = resolve_model_args(cfg.model)
    return sim_inputs_from_config(cfg, model, get_device(cfg.resources.device))


def test_8b_recipe_maps_to_the_simulators_8b_case_with_its_own_lengths():
    inp = inputs_for("8b_gsm8k")
    case = CASES["8b"]
    for key in ("generator_devices", "generator_tp", "generator_bytes_per_param", "trainer_devices",
                "trainer_fsdp", "trainer_tp", "prompts_per_step", "group_size"):
        assert getattr(inp, key) == case[key], key
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
    assert main(["bench", "--sync-vs-async", "--simulate", "recipe=8b_gsm8k", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert d["sync"]["step_s"] > 0 and d["async"]["step_s"] > 0
    assert d["published"]["sync"] == 22.45 and d["published"]["async"] == 8.90
    assert [row["case"] for row in d["calibration"]] == ["8b", "70b", "405b"]
    assert "22.45" in capsys.readouterr().out


@pytest.mark.parametrize("argv, words", [
    (["bench"], ["--sync-vs-async", "--weight-sync"]),
    (["bench", "--sync-vs-async", "--simulate", "recipe=cpu_tiny"], ["cpu"]),
    (["bench", "--sync-vs-async", "--steps", "0"], ["--steps=0"]),
    (["bench", "--sync-vs-async", "--weight-sync"], ["not allowed"]),
])
def test_bench_bad_input_exits_2_with_one_line(capsys, argv, words):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    for w in words:
        assert w in err


def test_static_batching_makes_the_async_generator_wait_for_each_batchs_longest_sample():
    results = {}
    for mode in ("continuous", "static"):
        cfg = load_config("8b_gsm8k", [f"generation.batching={mode}"])
        model, _ = resolve_model_args(cfg.model)
        assert inputs_for("8b_gsm8k", f"generation.batching={mode}").batching == mode
        results[mode] = simulate_config(cfg, model, get_device(cfg.resources.device))
    assert results["static"]["async"]["step_s"] > results["continuous"]["async"]["step_s"]
    assert results["static"]["sync"]["step_s"] == results["continuous"]["sync"]["step_s"]
