"""The scale simulator moves the way physics says when the model, GPUs or split change.

No test asserts a predicted time against the paper: calibration quality is reported by
`llamarl bench sync-vs-async --simulate` and docs/SIMULATOR.md, not enforced here.
"""
import json
from dataclasses import replace

import pytest

from llamarl_core.sim.cases import CASE_RECIPES, PUBLISHED_STEP_S, calibrate, case_inputs, format_table
from llamarl_core.sim.simulator import SimInputs, simulate
from llamarl_core.models.args import PRESETS


def test_more_generator_gpus_make_async_generation_faster():
    base = case_inputs("70b")  # 128 generator GPUs of TP 4 (fp8) beside 128 trainer GPUs (fsdp 128)
    times = [simulate(replace(base, generator_devices=g))["async"]["generation_s"]
             for g in (128, 256, 384)]
    assert times[0] > times[1] > times[2]


def test_a_bigger_model_makes_both_steps_slower():
    base = case_inputs("405b")  # a split on which all three presets fit
    results = [simulate(replace(base, model=PRESETS[name]))
               for name in ("llama3-8b", "llama3-70b", "llama3.1-405b")]
    for mode in ("sync", "async"):
        steps = [r[mode]["step_s"] for r in results]
        assert steps[0] < steps[1] < steps[2]


def test_more_devices_make_the_sync_baseline_faster():
    base = case_inputs("8b")  # sync runs on generator_devices + trainer_devices
    steps = [simulate(replace(base, generator_devices=n // 2, trainer_devices=n // 2))
             ["sync"]["step_s"] for n in (64, 256, 1024)]
    assert steps[0] > steps[1] > steps[2]


def test_more_trainer_gpus_make_training_faster():
    base = case_inputs("8b")  # fsdp 8: any multiple of 8 trainer GPUs holds the state
    times = [simulate(replace(base, generator_devices=256 - t, trainer_devices=t))
             ["async"]["training_s"] for t in (64, 128, 192)]
    assert times[0] > times[1] > times[2]


def test_fp8_generator_weights_decode_faster_than_bf16():
    fp8 = case_inputs("70b")
    bf16 = replace(fp8, generator_bytes_per_param=2.0)
    assert simulate(fp8)["async"]["decode_step_s"] < simulate(bf16)["async"]["decode_step_s"]


def test_longer_samples_make_generation_and_training_slower():
    base = case_inputs("8b")
    short, long = simulate(base), simulate(replace(base, new_tokens=1600))
    for mode in ("sync", "async"):
        assert long[mode]["generation_s"] > short[mode]["generation_s"]
        assert long[mode]["training_s"] > short[mode]["training_s"]


def test_colocated_training_state_leaves_less_room_for_kv_cache():
    result = simulate(case_inputs("8b"))  # both modes generate at TP 1 here
    assert result["sync"]["gen_tp"] == result["async"]["gen_tp"] == 1
    assert result["sync"]["kv_capacity_sequences"] < result["async"]["kv_capacity_sequences"]


def test_sync_405b_generation_leaves_the_node_because_bf16_weights_plus_state_do_not_fit():
    # 405.9B * 2 B / 8 = 101 GB per GPU > 80 GB: the trainer layout must grow past TP 8
    assert simulate(case_inputs("405b"))["sync"]["gen_tp"] > 8


def test_offpolicy_knob_at_zero_removes_the_overlap():
    base = case_inputs("70b")
    overlapped = simulate(base)["async"]
    serial = simulate(replace(base, max_offpolicy_steps=0))["async"]
    assert serial["step_s"] > overlapped["step_s"]


def test_simulate_returns_json_with_the_documented_keys():
    result = simulate(case_inputs("8b"))
    for mode in ("sync", "async"):
        for key in ("step_s", "generation_s", "training_s", "weight_sync_s",
                    "gen_batch_per_replica"):
            assert key in result[mode]
    assert result["speedup"] == pytest.approx(result["sync"]["step_s"] /
                                              result["async"]["step_s"])
    assert "train_mfu" in result["constants"]
    json.dumps(result)


def test_calibrate_runs_every_published_case_and_the_table_has_a_row_each():
    rows = calibrate()
    assert [r["case"] for r in rows] == list(PUBLISHED_STEP_S) == list(CASE_RECIPES)
    assert [r["recipe"] for r in rows] == ["8b_gsm8k", "70b_gsm8k", "405b_math"]
    assert rows[0]["sync"]["published_s"] == 22.45 and rows[0]["async"]["published_s"] == 8.90
    assert format_table(rows).row_count == len(rows)
    json.dumps([{k: v for k, v in r.items()} for r in rows])


@pytest.mark.parametrize("field,value,message", [
    ("generator_tp", 3, "generator_devices=128 is not a multiple of generator_tp=3"),
    ("trainer_fsdp", 0, "SimInputs.trainer_fsdp must be a positive integer"),
    ("trainer_fsdp", 48, "trainer_devices=128 is not a multiple of trainer_fsdp"),
    ("generator_bytes_per_param", 0.0, "SimInputs.generator_bytes_per_param must be > 0"),
    ("max_offpolicy_steps", -1, "SimInputs.max_offpolicy_steps must be >= 0"),
])
def test_bad_inputs_name_the_field(field, value, message):
    spec = dict(vars(case_inputs("8b")))
    spec[field] = value
    with pytest.raises(ValueError, match=message):
        SimInputs(**spec)


def test_a_generator_whose_weights_do_not_fit_is_an_error_naming_the_tp():
    bf16_tp1 = replace(case_inputs("70b"), generator_tp=1, generator_bytes_per_param=2.0)
    with pytest.raises(ValueError, match="tp=1"):
        simulate(bf16_tp1)
