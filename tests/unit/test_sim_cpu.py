"""The CPU twin of the simulator (sim/cpu.py): each formula against numbers worked by hand.

Toy model: vocab 4, dim 2, 1 layer, 1 head, ffn 2 -> 50 parameters, 42 in matmuls (the input
embedding, 4 x 2, is a lookup). Workload: 4 rows, 2 prompt tokens, 3 new tokens on average,
the longest 6.
"""
import pytest

from llamarl_core.bench.sim_cpu import fit_efficiencies
from llamarl_core.models.args import ModelArgs
from llamarl_core.sim.cpu import (CpuFitted, CpuMeasured, CpuSystem, CpuWorkload, generation_seconds,
                                  simulate_async, simulate_sync, training_seconds)
from llamarl_core.sim.model import chunk_decode_steps

TOY = ModelArgs(vocab_size=4, dim=2, n_layers=1, n_heads=1, n_kv_heads=1, ffn_dim=2)
SYSTEM = CpuSystem(model=TOY, max_batch_size=8, micro_batch_size=4, batching="continuous", sync_ranks=2,
                   param_bytes=4, weight_transport="shm")
LOAD = CpuWorkload(rows=4, prompt_tokens=2, new_tokens=3, longest_new_tokens=6, async_trained_fraction=0.5)
# decode: 4 rows x (2 prompt x 2*42 + 3 new x (2*42 + 4*1*2*ctx 3.5)) = 4 x (168 + 336) = 2016 FLOPs
# train:  per row (2 + 6) tokens x (6*42 + 6*1*2*8) = 8 x 348 = 2784 FLOPs
# async rates: the generator at half its sync rate beside the trainer, the trainer at its sync rate
MEASURED = CpuMeasured(decode_flops_per_s=2016.0, train_flops_per_s=2784.0,
                       decode_beside_train_flops_per_s=1008.0, train_beside_decode_flops_per_s=2784.0,
                       decode_alone_speedup=4.0, train_alone_speedup=2.0,
                       memcpy_bytes_per_s=100.0, gloo_bytes_per_s=50.0, allreduce_bytes_per_s=50.0)
FITTED = CpuFitted(decode_matmul_efficiency=1.0, decode_layer_overhead_s=0.1, train_step_efficiency=0.5,
                   step_overhead_s=0.5)


def test_a_chunk_decodes_until_its_longest_row_ends_continuous_or_static():
    assert chunk_decode_steps(4, 8, 800, 3.0, "continuous") == 2400      # one wave: the longest row
    assert chunk_decode_steps(16, 8, 800, 3.0, "continuous") == 3200     # 16*800/8 + (2400 - 800)
    assert chunk_decode_steps(16, 8, 800, 3.0, "static") == 4800         # 2 waves x 2400
    assert chunk_decode_steps(16, 8, 800, 3.0, "streaming") == 1600      # what-if: no tail, 16*800/8
    with pytest.raises(ValueError, match="batching"):
        chunk_decode_steps(4, 8, 800, 3.0, "paged")


def test_generation_is_flops_over_the_engines_rate_plus_host_cost_per_layer_step():
    g = generation_seconds(SYSTEM, LOAD, FITTED, rows=4, flops_per_s=2016.0)
    assert g["flops"] == 2016 and g["decode_steps"] == 6
    assert g["seconds"] == pytest.approx(1.0 + 6 * 1 * 0.1)
    slower = generation_seconds(SYSTEM, LOAD, FITTED, rows=4, flops_per_s=1008.0)
    assert slower["seconds"] == pytest.approx(2.0 + 0.6)  # the host cost does not slow down


def test_training_pads_rows_to_the_longest_completion_and_runs_at_the_fitted_efficiency():
    t = training_seconds(SYSTEM, LOAD, FITTED, rows=4, flops_per_s=2784.0)
    assert t["flops"] == 4 * 2784
    assert t["seconds"] == pytest.approx(4 * 2784 / (2784 * 0.5))  # 8 s


def test_sync_step_is_half_the_rows_generated_then_trained_then_gradients_all_reduced():
    s = simulate_sync(SYSTEM, LOAD, MEASURED, FITTED)
    # 2 rows per rank: generate 1008/2016 + 0.6 = 1.1 s; train 2 x 2784 / 1392 = 4 s;
    # all-reduce 50 params x 4 B / 50 B/s = 4 s; + 0.5 s per step
    assert s["generation_s"] == pytest.approx(1.1)
    assert s["training_s"] == pytest.approx(4.0)
    assert s["allreduce_s"] == pytest.approx(4.0)
    assert s["step_s"] == pytest.approx(9.6)


def test_async_step_overlaps_the_roles_and_the_slower_one_speeds_up_once_alone():
    a = simulate_async(SYSTEM, LOAD, MEASURED, FITTED)
    # generator 4 rows beside the trainer (1008 FLOP/s): 2.0 + 0.6 host = 2.6 s; trainer 2 rows
    # (half skipped) beside the generator: 4 s, of which 2.6 s overlap and the remaining 1.4 s
    # run alone at 2x: 2.6 + 0.7 = 3.3 s.
    # Weight sync: one copy of 50 x 4 B at 100 B/s = 2 s, on the trainer's side of the step.
    assert a["generation_s"] == pytest.approx(2.6)
    assert a["training_s"] == pytest.approx(3.3)
    assert a["weight_sync_s"] == pytest.approx(2.0)
    assert a["step_s"] == pytest.approx(max(2.6, 3.3 + 2.0) + 0.5)
    assert a["bottleneck"] == "trainer"


def test_async_generator_left_alone_runs_at_its_own_alone_rate():
    quarter = CpuWorkload(**{**vars(LOAD), "async_trained_fraction": 0.25})
    a = simulate_async(SYSTEM, quarter, MEASURED, FITTED)
    # trainer 1 row: 2 s; generator 2.6 s beside it, its last 0.6 s alone at 4x: 2 + 0.15
    assert a["training_s"] == pytest.approx(2.0)
    assert a["generation_s"] == pytest.approx(2.15)
    assert a["step_s"] == pytest.approx(max(2.15, 2.0 + 2.0) + 0.5)


def test_gloo_weight_transport_prices_the_sync_at_the_gloo_rate():
    gloo = CpuSystem(**{**vars(SYSTEM), "weight_transport": "collective"})
    assert simulate_async(gloo, LOAD, MEASURED, FITTED)["weight_sync_s"] == pytest.approx(200 / 50)


def test_fitting_the_efficiencies_makes_the_sync_phases_match_what_was_measured():
    predicted = simulate_sync(SYSTEM, LOAD, MEASURED, FITTED)  # gen 1.1 (0.6 host), train 4.0
    result = {"predicted": {"sync": predicted}, "fitted_constants": FITTED.to_dict(),
              "measured": {"sync": {"phase_s_per_step": {"generate": 1.6, "train": 12.0}}}}
    fitted = fit_efficiencies(result, FITTED)
    # decode compute 0.5 s at efficiency 1 took 1.6 - 0.6 = 1.0 s: 0.5; train 2 s at 1 took
    # 12 s less the 4 s all-reduce the train phase holds: 0.25
    assert fitted.decode_matmul_efficiency == pytest.approx(0.5)
    assert fitted.train_step_efficiency == pytest.approx(0.25)
    refit = simulate_sync(SYSTEM, LOAD, MEASURED, fitted)
    assert refit["generation_s"] == pytest.approx(1.6) and refit["training_s"] == pytest.approx(8.0)


def test_each_mode_is_priced_with_the_constants_measured_around_its_runs():
    from llamarl_core.bench.sim_cpu import bracketing_constants

    def m(before, rate):
        return {"before": before, "decode_flops_per_s": rate, "train_flops_per_s": rate,
                "decode_beside_train_flops_per_s": rate, "train_beside_decode_flops_per_s": rate,
                "decode_alone_speedup": 1.0, "train_alone_speedup": 1.0,
                "memcpy_bytes_per_s": 1.0, "gloo_bytes_per_s": 1.0, "allreduce_bytes_per_s": 1.0, "shapes": {}}
    # order: before sync_0 (10), before async_0 (20), before sync_1 (30), before async_1 (40), end (50)
    c = bracketing_constants([m("sync", 10), m("async", 20), m("sync", 30), m("async", 40), m(None, 50)])
    assert c["sync"].train_flops_per_s == 25    # median of 10, 20 (around sync_0) and 30, 40 (sync_1)
    assert c["async"].train_flops_per_s == 35   # median of 20, 30 and 40, 50


def test_the_measured_constants_are_the_fields_the_twin_prices_with():
    from llamarl_core.bench.cpu_constants import measure_cpu_constants
    from llamarl_core.models import get_preset, with_overrides

    tiny = with_overrides(get_preset("tiny-2m"), dim=32, n_layers=1, n_heads=2, n_kv_heads=2, ffn_dim=64)
    r = measure_cpu_constants(model_args=tiny, decode_rows=8, train_rows=4, train_seq=8, weight_bytes=4096,
                              seconds={"decode": 0.05, "train": 0.1})
    c = CpuMeasured(**{f: r[f] for f in CpuMeasured.__dataclass_fields__})
    assert all(v > 0 for v in c.to_dict().values())
    assert c.decode_alone_speedup >= 1 and c.train_alone_speedup >= 1
    assert r["shapes"] == {"decode": [8, 32, 64], "train": [4, 8]}
