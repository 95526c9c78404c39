"""The DDMA plan: FSDP rows, TP slices and their intersections, worked out by hand."""
import pytest
import torch

from llamarl_core.models import ModelArgs
from llamarl_core.transport.ddma_plan import Piece, build_plan, dst_block, fsdp_rows, src_block, tensor_view

WO = "layers.0.attention.wo.weight"  # row-parallel: generator TP slices split dim 1
# what tp_slice checks tp=2 against (heads, KV heads, ffn_dim); the shapes below are the tests' own
ARGS = ModelArgs(vocab_size=10, dim=4, n_layers=1, n_heads=2, n_kv_heads=2, ffn_dim=4)


def test_fsdp_rows_are_torch_chunk_sizes_with_an_empty_tail():
    assert [fsdp_rows(7, 2, r) for r in range(2)] == [(0, 4), (4, 7)]
    assert [fsdp_rows(1, 2, r) for r in range(2)] == [(0, 1), (1, 1)]
    assert [fsdp_rows(10, 4, r) for r in range(4)] == [(0, 3), (3, 6), (6, 9), (9, 10)]


def test_a_row_parallel_matrix_splits_into_one_block_per_trainer_and_generator_pair():
    # wo is [6, 4]: trainer 0 owns rows 0-2, trainer 1 rows 3-5; TP rank 0 needs columns 0-1,
    # TP rank 1 columns 2-3. Each generator gets a [6, 2] tensor: rows 0-2 from trainer 0,
    # rows 3-5 from trainer 1.
    plan = build_plan({WO: ((6, 4), torch.float32)}, trainer_ranks=2, generator_ranks=2, tp_size=2, args=ARGS)
    assert set(plan.pieces) == {
        Piece(WO, 0, 0, (0, 3), (0, 2), (0, 3), 4), Piece(WO, 1, 0, (0, 3), (0, 2), (3, 6), 4),
        Piece(WO, 0, 1, (0, 3), (2, 4), (0, 3), 4), Piece(WO, 1, 1, (0, 3), (2, 4), (3, 6), 4)}
    assert [t.shape for s in plan.slots for t in s] == [(6, 2), (6, 2)]
    assert plan.link_nbytes(0, 1) == 3 * 2 * 4  # 3 rows x 2 columns of float32


def test_a_column_parallel_slice_takes_rows_only_from_the_trainers_that_own_them():
    # wq [8, 2], T=2 (rows 0-3 | 4-7), tp=2 (rows 0-3 | 4-7): one trainer per generator, no crossing
    name = "layers.0.attention.wq.weight"
    plan = build_plan({name: ((8, 2), torch.float32)}, trainer_ranks=2, generator_ranks=2, tp_size=2, args=ARGS)
    assert [(p.trainer, p.generator, p.src_rows, p.dst_rows) for p in plan.pieces] == [
        (0, 0, (0, 4), (0, 4)), (1, 1, (0, 4), (0, 4))]


def test_every_generator_byte_is_written_exactly_once_and_matches_its_slice():
    shapes = {WO: ((6, 4), torch.float32), "norm.weight": ((5,), torch.float32),
              "output.weight": ((10, 4), torch.float32)}
    full = {n: torch.arange(float(torch.Size(s).numel())).view(s) for n, (s, _) in shapes.items()}
    plan = build_plan(shapes, trainer_ranks=2, generator_ranks=2, tp_size=2, args=ARGS, dtype=torch.bfloat16,
                      max_piece_bytes=8)  # tiny bands: pieces are cut into row bands
    assert sum(plan.link_nbytes(t, g) for t in range(2) for g in range(2)) == \
        sum(t.nbytes for s in plan.slots for t in s)
    for g in range(2):
        slot = torch.full((plan.slot_nbytes[g],), 255, dtype=torch.uint8)
        views = {t.name: tensor_view(slot, t, torch.bfloat16) for t in plan.slots[g]}
        for p in (p for p in plan.pieces if p.generator == g):
            lo, hi = fsdp_rows(full[p.name].shape[0], 2, p.trainer)
            dst_block(views[p.name], p).copy_(src_block(full[p.name][lo:hi], p))
        assert torch.equal(views[WO], full[WO][:, 2 * g:2 * g + 2].bfloat16())
        assert torch.equal(views["norm.weight"], full["norm.weight"].bfloat16())  # replicated
        assert torch.equal(views["output.weight"], full["output.weight"].bfloat16())  # the head: replicated


def test_a_tp_size_that_does_not_divide_a_dimension_is_refused_naming_the_tensor():
    with pytest.raises(ValueError, match="wo.weight"):
        build_plan({WO: ((6, 5), torch.float32)}, trainer_ranks=1, generator_ranks=2, tp_size=2, args=ARGS)


def test_the_plan_slices_with_the_models_tp_rule_kv_heads_replicated_past_their_count():
    # 2 query heads, 1 KV head of head_dim 2, tp=2: wq [4, 4] splits by rows (2 each); wk [2, 4]
    # is the one KV head both ranks' queries use, so both hold all of it (models/tp_slices.py)
    one_kv = ModelArgs(vocab_size=10, dim=4, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=4)
    a = "layers.0.attention."
    shapes = {a + "wq.weight": ((4, 4), torch.float32), a + "wk.weight": ((2, 4), torch.float32)}
    plan = build_plan(shapes, trainer_ranks=1, generator_ranks=2, tp_size=2, args=one_kv)
    assert [[(t.name[len(a):], t.shape) for t in slot] for slot in plan.slots] == [[("wk.weight", (2, 4)),
                                                                                   ("wq.weight", (2, 4))]] * 2
    assert {(p.generator, p.name[len(a):]): p.src_rows for p in plan.pieces} == {
        (0, "wq.weight"): (0, 2), (1, "wq.weight"): (2, 4), (0, "wk.weight"): (0, 2), (1, "wk.weight"): (0, 2)}
    with pytest.raises(ValueError, match="needs the model's ModelArgs"):
        build_plan(shapes, trainer_ranks=1, generator_ranks=2, tp_size=2)


def test_fp8_on_the_wire_carries_one_byte_per_weight_and_a_float32_scale_per_row():
    # wo [6, 4] in bf16, fp8 on the wire, T=2, tp=2: each generator holds [6, 2] fp8 (12 B) with
    # 6 scales (24 B) placed after its data, 64-byte aligned; trainer 0 sends it rows 0-2:
    # 3 x 2 B of fp8 + 3 x 4 B of scales = 18 B (bf16 would be 12 B, fp32 24 B)
    from llamarl_core.transport.ddma_plan import FP8_DTYPE, fp8_rows, scale_view
    norm = "norm.weight"
    plan = build_plan({WO: ((6, 4), torch.bfloat16), norm: ((4,), torch.bfloat16)}, trainer_ranks=2,
                      generator_ranks=2, tp_size=2, args=ARGS, dtype=torch.bfloat16, fp8=lambda n: n == WO)
    assert plan.fp8_names == {WO} and plan.wire_dtype(WO) == FP8_DTYPE and plan.wire_dtype(norm) == torch.bfloat16
    wo, nrm = plan.slots[1]
    assert (wo.offset_bytes, wo.nbytes, wo.scale_offset_bytes) == (0, 12, 64) and not nrm.fp8
    assert nrm.offset_bytes == 128  # after 24 B of scales at 64, aligned
    assert plan.link_nbytes(0, 1) == 3 * 2 + 3 * 4 + 2 * 2  # + trainer 0's 2 norm elements in bf16
    slot = torch.zeros(plan.slot_nbytes[1], dtype=torch.uint8)
    assert tensor_view(slot, wo, torch.bfloat16).dtype == FP8_DTYPE and scale_view(slot, wo).shape == (6,)
    # the scale of a row is its absmax / 448, and the row's largest element lands on 448 exactly
    q, s = fp8_rows(torch.tensor([[1.0, -2.0], [0.5, 0.25]]), torch.bfloat16)
    assert s.tolist() == pytest.approx([2.0 / 448, 0.5 / 448], rel=1e-6) and s.dtype == torch.float32
    assert q.float()[0, 1].item() == -448.0


def test_fp8_on_the_wire_refuses_a_vector():
    with pytest.raises(ValueError, match="needs a matrix"):
        build_plan({"norm.weight": ((4,), torch.float32)}, trainer_ranks=1, generator_ranks=1, fp8=lambda n: True)


def test_under_hsdp_each_generator_gets_every_row_once_from_one_replica_s_shards():
    # T=4 trainer ranks, fsdp=2: replica 0 = ranks 0, 1 and replica 1 = ranks 2, 3 each hold
    # rows 0-2 | 3-5 of wq [6, 2] (rank t: fsdp_rows(6, 2, t % 2)); G=2 generators (tp=1) take
    # turns over the replicas: generator 0 from ranks 0, 1, generator 1 from ranks 2, 3.
    # (The old plan read rank t's rows as fsdp_rows(6, 4, t): rows 0-1, 2-3, 4-5, none.)
    name = "layers.0.attention.wq.weight"
    plan = build_plan({name: ((6, 2), torch.float32)}, trainer_ranks=4, generator_ranks=2, trainer_shards=2)
    assert [(p.trainer, p.generator, p.src_rows, p.dst_rows) for p in plan.pieces] == [
        (0, 0, (0, 3), (0, 3)), (1, 0, (0, 3), (3, 6)), (2, 1, (0, 3), (0, 3)), (3, 1, (0, 3), (3, 6))]
    assert [plan.shard_rows(name, t) for t in range(4)] == [(0, 3), (3, 6), (0, 3), (3, 6)]
    assert [sorted({p.trainer for p in plan.pieces if p.generator == g}) for g in range(2)] == [[0, 1], [2, 3]]


def test_a_sender_refuses_a_shard_with_other_rows_than_the_plan_gives_it():
    from llamarl_core.transport.ddma import DdmaSender
    name = "layers.0.attention.wq.weight"
    plan = build_plan({name: ((6, 2), torch.float32)}, trainer_ranks=4, generator_ranks=2, trainer_shards=2)
    sender = object.__new__(DdmaSender)  # only the check: no store, no peers
    sender.plan, sender.rank = plan, 2
    sender.links = [plan.pieces_between(2, g) for g in range(2)]
    sender._check({name: torch.zeros(3, 2)})  # HSDP: rank 2 holds rows 0-2 of its replica's copy
    with pytest.raises(ValueError, match=r"'layers.0.attention.wq.weight' shard has 2 rows.*\[0, 3\)"):
        sender._check({name: torch.zeros(2, 2)})  # fewer rows (the old check let any <= pass)


def test_the_engines_fused_groups_lie_back_to_back_in_every_slot():
    # wq [4, 2], wk [2, 2], wv [2, 2] (the engine's qkv), tp=2: each generator rank holds 2 + 1 +
    # 1 rows of 2 float32 = 16 + 8 + 8 = 32 B, one run; the norm starts aligned after it.
    from llamarl_core.generation.fused import fused_param_groups
    a = "layers.0.attention."
    shapes = {a + "wq.weight": ((4, 2), torch.float32), a + "wk.weight": ((2, 2), torch.float32),
              a + "wv.weight": ((2, 2), torch.float32), "layers.0.ffn_norm.weight": ((2,), torch.float32)}
    groups = fused_param_groups(shapes)
    assert groups == [[a + "wq.weight", a + "wk.weight", a + "wv.weight"]]
    plan = build_plan(shapes, trainer_ranks=1, generator_ranks=2, tp_size=2, args=ARGS, groups=groups)
    for slot in plan.slots:
        at = {t.name: (t.offset_bytes, t.nbytes) for t in slot}
        assert [at[n] for n in groups[0]] == [(0, 16), (16, 8), (24, 8)]
        assert at["layers.0.ffn_norm.weight"][0] == 64
