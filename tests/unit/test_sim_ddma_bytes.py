"""The simulator counts the bytes of each DDMA link as the transport's plan moves them."""
import pytest

from llamarl_core.models.args import ModelArgs, get_preset
from llamarl_core.models.llama import Llama
from llamarl_core.models.tp_slices import is_block_linear
from llamarl_core.sim.ddma_bytes import link_bytes, param_shapes
from llamarl_core.transport.ddma_plan import build_plan

TOY = ModelArgs(vocab_size=4, dim=2, n_layers=1, n_heads=1, n_kv_heads=1, ffn_dim=2)  # 50 params


def test_param_shapes_are_the_modules_own():
    args = get_preset("tiny-2m")
    assert param_shapes(args) == {n: tuple(p.shape) for n, p in Llama(args).named_parameters()}


def test_one_trainer_to_one_generator_carries_the_whole_model_in_the_wire_dtype():
    b = link_bytes(get_preset("tiny-2m"), trainer_ranks=1, generator_ranks=1, tp=1, bytes_per_elem=4)
    assert b["send_max"] == b["recv_max"] == b["total"] == 2_506_496 * 4  # = the run's sync/bytes


def test_a_trainer_rank_past_the_ceil_sized_shards_sends_nothing():
    # T=3: a 4-row tensor splits 2/2/0, a 2-row one 1/1/0 (torch.chunk), so ranks 0 and 1 each
    # send 25 of the 50 elements (by hand: embedding 4, output 4, seven 2x2 matrices 1 row = 2
    # each, three norms 1 each) and rank 2 sends none; the generator receives all 50.
    b = link_bytes(TOY, trainer_ranks=3, generator_ranks=1, tp=1, bytes_per_elem=2)
    assert b["send_per_trainer_rank"] == [50, 50, 0]
    assert b["recv_max"] == 100 and b["send_max"] == 50


def test_fp8_blocks_travel_as_one_byte_per_weight_plus_a_scale_per_row():
    # seven 2x2 block linears: 28 weights at 1 B + 14 rows x 4 B of scales = 84 B; the rest
    # (embedding 8, output head 8, three norms 2 each = 22 elements) stays at 2 B: 44 B
    b = link_bytes(TOY, trainer_ranks=1, generator_ranks=1, tp=1, bytes_per_elem=2, fp8_blocks=True)
    assert b["recv_max"] == 28 + 14 * 4 + 22 * 2


@pytest.mark.parametrize("T,G,tp,fp8,shards", [(2, 2, 2, False, 0), (2, 4, 2, False, 0), (3, 2, 1, False, 0),
                                                (2, 4, 2, True, 0), (4, 2, 2, False, 2), (4, 6, 2, False, 2),
                                                (4, 4, 2, False, 2), (8, 8, 4, True, 4)])
def test_link_bytes_equal_the_transport_plans(T, G, tp, fp8, shards):
    args = get_preset("tiny-2m")
    shapes = param_shapes(args)
    import torch

    plan = build_plan({n: (s, torch.bfloat16) for n, s in shapes.items()}, trainer_ranks=T,
                      generator_ranks=G, tp_size=tp, args=args, fp8=is_block_linear if fp8 else None,
                      trainer_shards=shards)
    b = link_bytes(args, trainer_ranks=T, generator_ranks=G, tp=tp, bytes_per_elem=2, fp8_blocks=fp8,
                   trainer_shards=shards)
    assert b["send_per_trainer_rank"] == [sum(plan.link_nbytes(t, g) for g in range(G)) for t in range(T)]
    assert b["recv_per_tp_rank"] == [sum(plan.link_nbytes(t, g) for t in range(T)) for g in range(tp)]


def test_under_hsdp_every_trainer_rank_sends_an_even_share():
    # T=4 as 2 replicas x 2 shards, G=4 as 2 generator replicas x TP 2. The 4 trainer ranks send
    # what the 4 generator ranks receive (each generator replica its TP slices, the replicated
    # norms on both of its ranks), a quarter each. Choosing the copy by generator rank parity
    # (g % 2) sent TP rank 0's rows always from replica 0: 1.62x the even share on two ranks.
    import torch
    args = get_preset("tiny-2m")
    plan = build_plan({n: (s, torch.bfloat16) for n, s in param_shapes(args).items()}, trainer_ranks=4,
                      generator_ranks=4, tp_size=2, args=args, trainer_shards=2)
    sent = [sum(plan.link_nbytes(t, g) for g in range(4)) for t in range(4)]
    received = [sum(plan.link_nbytes(t, g) for t in range(4)) for g in range(4)]
    assert received[0] + received[1] == received[2] + received[3] >= 2_506_496 * 2  # a replica: a copy
    assert sent == [sum(received) // 4] * 4
    assert [sorted({p.trainer for p in plan.pieces if p.generator == g}) for g in range(4)] == \
        [[0, 1], [2, 3], [2, 3], [0, 1]]
