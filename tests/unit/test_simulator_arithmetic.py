"""The scale simulator's formulas, checked against arithmetic done by hand.

The toy model: vocab 10, dim 4, 1 layer, 2 heads (head_dim 2), 1 KV head, ffn 8, untied.
  attention params  4*4*2 (wq, wo) + 4*2*2 (wk, wv)            =  48
  MLP params        3*4*8                                       =  96
  norms             2*4 per layer + 4 final                     =  12
  embedding / head  10*4 each                                   =  80
  num_params        48 + 96 + 12 + 80                           = 236
  matmul_params     236 - 40 (the embedding table is a lookup)  = 196
  kv bytes / token  2 (K,V) * 1 layer * 1 head * 2 dims * 2 B   =   8
"""
import math
from dataclasses import replace

import pytest

from llamarl_core.sim import model as m
from llamarl_core.sim.constants import GIB, SimConstants
from llamarl_core.sim.cases import case_inputs
from llamarl_core.sim.simulator import simulate
from llamarl_core.models.args import PRESETS, ModelArgs
from llamarl_core.config.hardware import DEVICES, DeviceSpec

TOY = ModelArgs(vocab_size=10, dim=4, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=8)
# A device with round numbers: 1 TFLOP/s, 1 GB/s HBM, 10 GB/s NVLink, 1 GB/s IB, 1 GiB.
TOY_DEVICE = DeviceSpec("toy", memory_gib=1.0, bf16_tflops=1.0, hbm_gbps=1.0, nvlink_gbps=10.0,
                        ib_gbps=1.0, devices_per_node=8)
H100 = DEVICES["h100-80gb"]
C = SimConstants()


def test_toy_model_parameter_counts_match_the_hand_count():
    assert TOY.num_params() == 236
    assert m.matmul_params(TOY) == 196
    assert TOY.kv_bytes_per_token(2) == 8


def test_training_flops_per_token_are_six_n_plus_causal_attention():
    # 6 * 196 + 6 * n_layers(1) * dim(4) * seq(10) = 1176 + 240
    assert m.train_flops_per_token(TOY, seq_tokens=10) == 1416


def test_decode_flops_per_token_are_two_n_plus_attention_over_the_context():
    # 2 * 196 + 4 * 1 * 4 * 10 = 392 + 160
    assert m.decode_flops_per_token(TOY, context_tokens=10) == 552


def test_llama3_8b_training_flops_are_about_six_times_its_parameters():
    # matmul params = 8_030_261_248 - 128_256 * 4096 = 7_504_924_672; 6N = 45.03 GFLOP;
    # attention at seq 1000: 6 * 32 * 4096 * 1000 = 0.786 GFLOP
    flops = m.train_flops_per_token(PRESETS["llama3-8b"], seq_tokens=1000)
    assert flops == 6 * 7_504_924_672 + 6 * 32 * 4096 * 1000


def test_toy_decode_step_is_bytes_over_bandwidth_plus_layer_overhead():
    c = SimConstants(decode_hbm_efficiency=0.5, decode_mfu=0.5, decode_layer_overhead_s=1e-6)
    # bytes: weights 196 * 2 = 392, KV 10 tokens * 8 = 80 -> 472 B at 0.5 GB/s = 944 ns;
    # compute 552 FLOP at 0.5 TFLOP/s = 1.1 ns (smaller); TP 1 -> no all-reduce; + 1 us.
    seconds = m.decode_step_seconds(TOY, TOY_DEVICE, c, tp=1, batch=1, context_tokens=10,
                                     bytes_per_param=2)
    assert seconds == pytest.approx(944e-9 + 1e-6)


def test_8b_decode_step_at_batch_one_reads_the_bf16_weights_once():
    c = SimConstants(decode_hbm_efficiency=0.7, decode_layer_overhead_s=0.0)
    # 7_504_924_672 params * 2 B = 15.01 GB at 3350 GB/s * 0.7 = 2345 GB/s -> 6.4007 ms
    seconds = m.decode_step_seconds(PRESETS["llama3-8b"], H100, c, tp=1, batch=1,
                                    context_tokens=0, bytes_per_param=2)
    assert seconds == pytest.approx(7_504_924_672 * 2 / 2345e9)


def test_tp_allreduce_inside_a_node_pays_ring_latency_and_nvlink_bandwidth():
    # 2*(8-1) hops * 3 us = 42 us; 2*7/8 * 1 GB / (450 GB/s * 0.8 = 360 GB/s) = 4.8611 ms
    seconds = m.allreduce_seconds(1e9, 8, H100, C)
    assert seconds == pytest.approx(42e-6 + 1.75e9 / 360e9)


def test_allreduce_across_nodes_runs_at_infiniband_pace():
    # 2*15 hops * 8 us = 240 us; 2*15/16 * 1 GB / (50 GB/s * 0.8 = 40 GB/s) = 46.875 ms
    seconds = m.allreduce_seconds(1e9, 16, H100, C)
    assert seconds == pytest.approx(240e-6 + 46.875e-3)


def test_a_two_member_group_spread_over_nodes_uses_infiniband():
    # the dp all-reduce of HSDP: 2 replicas, 128 devices apart -> IB, 2 hops * 8 us
    seconds = m.allreduce_seconds(1e9, 2, H100, C, span_devices=128)
    assert seconds == pytest.approx(16e-6 + 1e9 / 40e9)


def test_gather_moves_all_but_the_local_shard():
    # 3/4 of 1 GB over 360 GB/s
    assert m.gather_seconds(1e9, 4, H100, C) == pytest.approx(0.75e9 / 360e9)
    assert m.gather_seconds(1e9, 1, H100, C) == 0.0


def test_kv_capacity_counts_whole_sequences_in_the_free_memory():
    c = SimConstants(reserved_gib=0.25)
    # free = 1 GiB - 0.25 GiB reserved - 0.25 GiB resident = 0.5 GiB = 536_870_912 B;
    # one 100-token sequence = 100 * 8 B = 800 B -> floor(671_088.64) = 671_088
    capacity = m.kv_capacity_sequences(TOY, TOY_DEVICE, c, tp=1,
                                       resident_bytes_per_device=0.25 * GIB, seq_tokens=100)
    assert capacity == 671_088


def test_kv_heads_are_replicated_beyond_the_kv_head_count():
    # llama3-70b has 8 KV heads: TP 16 stores the same 1/8 of each token as TP 8
    model = PRESETS["llama3-70b"]
    assert m.kv_bytes_per_token_per_device(model, 16, 2) == \
        m.kv_bytes_per_token_per_device(model, 8, 2) == 327_680 / 8


def test_training_on_one_device_is_flops_over_peak_times_mfu():
    c = SimConstants(train_mfu=0.5)
    # 1000 tokens * 1416 FLOP (seq 10) = 1.416 MFLOP at 0.5 TFLOP/s = 2.832 us; no comm
    train = m.training_seconds(TOY, TOY_DEVICE, c, devices=1, fsdp=1, tp=1, tokens=1000,
                               seq_tokens=10)
    assert train["seconds"] == pytest.approx(2.832e-6)
    assert train["fsdp_comm_s"] == train["dp_comm_s"] == train["tp_comm_s"] == 0.0


def test_training_state_is_sixteen_bytes_per_parameter_over_the_shards():
    # 236 params * 16 B / (4 fsdp * 2 tp) = 472 B
    assert m.train_state_bytes_per_device(TOY, C, fsdp=4, tp=2) == 472


def test_8b_weight_sync_sends_each_tp1_generator_the_whole_bf16_model_over_ib():
    result = simulate(case_inputs("8b"))
    # receive 8_030_261_248 * 2 B per generator GPU; each of 128 trainer GPUs sends
    # 1/128 of 128 copies = the same bytes; at 40 GB/s plus 0.2 s fixed
    expected = 8_030_261_248 * 2 / 40e9 + C.weight_sync_overhead_s
    assert result["async"]["weight_sync_s"] == pytest.approx(expected)


def test_async_generation_of_one_wave_lasts_its_longest_row_when_generated_chunk_by_chunk():
    inp = replace(case_inputs("8b"), streaming=False)
    result = simulate(inp)["async"]
    # 2048 sequences over 128 TP-1 replicas = 16 each, all in one batch; the chunk goes to the
    # trainer whole, so it lasts its longest row: 800 mean x 3.0 = 2400 decode steps
    assert result["gen_batch_per_replica"] == 16
    assert result["decode_steps"] == 2400
    step = m.decode_step_seconds(inp.model, inp.device, C, 1, 16, 384 + 400, 2.0)
    prefill = m.prefill_seconds(inp.model, inp.device, C, 1, 16 * 384)
    assert result["generation_s"] == pytest.approx(prefill + 2400 * step)


def test_streaming_async_generation_pays_no_tail_as_the_engine_is_built():
    inp = case_inputs("8b")
    assert inp.streaming  # every async generator streams
    result = simulate(inp)
    # the slots stay full across steps: 16 rows x 800 mean / 16 slots = 800 decode steps
    assert result["async"]["decode_steps"] == 800 and result["async_batching"] == "streaming"
    assert result["what_if_chunked"]["async_step_s"] > result["async"]["step_s"]
    assert result["sync"]["decode_steps"] == 2400  # sync still waits for its longest row


def test_sync_generation_waits_for_the_longest_sample():
    result = simulate(case_inputs("8b"))["sync"]
    # 2048 sequences over 256 replicas = 8 each in one wave; the wave lasts as long as the
    # longest sample: 800 mean * 3.0 = 2400 steps
    assert result["gen_batch_per_replica"] == 8
    assert result["decode_steps"] == pytest.approx(800 * C.max_to_mean_new_tokens)


def test_async_step_overlaps_generation_with_training():
    r = simulate(case_inputs("70b"))["async"]
    # the trainer sends the weights before its next batch; the generator swaps between steps
    expected = max(r["generation_s"], r["training_s"] + r["weight_sync_s"]) + r["overhead_s"]
    assert r["step_s"] == pytest.approx(expected)
    assert math.isfinite(r["step_s"])
