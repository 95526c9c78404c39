"""Bucket layout of weight sync: pure, single process (hand-derived offsets)."""

import pytest
import torch

from llamarl_core.transport.weight_sync_layout import (
    build_layout,
    check_tensors,
    describe_mismatch,
    direct_bytes,
    pack_bucket,
    pieces,
    unpack_bucket,
)

F32 = torch.float32
# Sizes in float32 bytes: a 16*4=64, b 8*8*4=256, c 200*4=800, d 300*4=1200, e 4*4=16.
SHAPES = {
    "e": (torch.Size([4]), F32),
    "c": (torch.Size([200]), F32),
    "a": (torch.Size([16]), F32),
    "d": (torch.Size([300]), F32),
    "b": (torch.Size([8, 8]), F32),
}
ONE_KIB_IN_MB = 1 / 1024


def _where(layout):
    return {s.name: (s.bucket, s.offset_bytes, s.nbytes) for s in layout.slots}


def test_tensors_are_packed_in_name_order_into_buckets_of_at_most_bucket_mb():
    layout = build_layout(SHAPES, bucket_mb=ONE_KIB_IN_MB, wire_dtype=None)
    # cap 1024 B. bucket 0: a@0 (64 B), b@64 (256 B) -> ends 320; c would end at 320+800=1120 > 1024.
    # bucket 1: c@0 (800 B); d would start at align64(800)=832, end 2032 > 1024.
    # bucket 2: d@0 (1200 B, bigger than a bucket: alone); e would end at 1216+16 > 1024.
    # bucket 3: e@0 (16 B). A bucket ends where its last tensor ends.
    assert _where(layout) == {
        "a": (0, 0, 64), "b": (0, 64, 256), "c": (1, 0, 800), "d": (2, 0, 1200), "e": (3, 0, 16),
    }
    assert layout.bucket_nbytes == (320, 800, 1200, 16)
    assert layout.total_nbytes == 64 + 256 + 800 + 1200 + 16  # 2336
    assert [s.name for s in layout.slots] == ["a", "b", "c", "d", "e"]


def test_bf16_wire_dtype_halves_float_bytes_and_keeps_integer_tensors():
    shapes = {**SHAPES, "step": (torch.Size([3]), torch.int64)}
    layout = build_layout(shapes, bucket_mb=ONE_KIB_IN_MB, wire_dtype=torch.bfloat16)
    # bf16: a 32, b 128, c 400, d 600, e 8; step int64 3*8 = 24.
    # bucket 0: a@0, b@64 (end 192), c@192 (end 592); d at align64(592)=640 would end 1240 > 1024.
    # bucket 1: d@0 (end 600), e@640 (end 648), step@704 (end 728).
    assert _where(layout) == {
        "a": (0, 0, 32), "b": (0, 64, 128), "c": (0, 192, 400),
        "d": (1, 0, 600), "e": (1, 640, 8), "step": (1, 704, 24),
    }
    assert {s.name: s.wire_dtype for s in layout.slots}["step"] == torch.int64


def test_pack_then_unpack_reproduces_the_state_in_place():
    layout = build_layout(SHAPES, bucket_mb=ONE_KIB_IN_MB, wire_dtype=None)
    g = torch.Generator().manual_seed(0)
    state = {n: torch.randn(shape, generator=g) for n, (shape, _) in SHAPES.items()}
    params = {n: torch.zeros(shape) for n, (shape, _) in SHAPES.items()}
    ptrs = {n: p.data_ptr() for n, p in params.items()}
    buckets = [torch.empty(n, dtype=torch.uint8) for n in layout.bucket_nbytes]
    for b in range(layout.num_buckets):
        pack_bucket(layout, buckets, b, state)
        unpack_bucket(layout, buckets, b, params)
    assert all(torch.equal(params[n], state[n]) for n in SHAPES)
    assert {n: p.data_ptr() for n, p in params.items()} == ptrs


def test_a_wrong_shape_is_reported_with_the_tensor_name():
    layout = build_layout(SHAPES, bucket_mb=1.0, wire_dtype=None)
    params = {n: torch.zeros(shape) for n, (shape, _) in SHAPES.items()}
    params["b"] = torch.zeros(8, 4)
    with pytest.raises(ValueError, match=r"tensor 'b' .* shape \(8, 4\), expected \(8, 8\)"):
        check_tensors(layout, params, side="generator params")
    del params["b"]
    with pytest.raises(ValueError, match=r"missing \['b'\]"):
        check_tensors(layout, params, side="generator params")


def test_layout_mismatch_between_sides_names_the_first_differing_tensor():
    ours = build_layout(SHAPES, bucket_mb=1.0, wire_dtype=None).spec()
    theirs = build_layout({**SHAPES, "c": (torch.Size([100]), F32)}, bucket_mb=1.0, wire_dtype=None).spec()
    msg = describe_mismatch(ours, theirs, ours_label="generator", theirs_label="trainer")
    assert msg.startswith("tensor 'c': trainer has shape (100,)")
    assert describe_mismatch(ours, ours, ours_label="generator", theirs_label="trainer") is None


def test_bad_bucket_size_and_an_unsupported_wire_dtype_are_rejected():
    with pytest.raises(ValueError, match="bucket_mb"):
        build_layout(SHAPES, bucket_mb=0, wire_dtype=None)
    with pytest.raises(ValueError, match="wire_dtype"):
        build_layout(SHAPES, bucket_mb=1.0, wire_dtype=torch.int16)


def test_a_lone_contiguous_tensor_in_wire_dtype_is_its_own_bucket_without_copy():
    layout = build_layout(SHAPES, bucket_mb=ONE_KIB_IN_MB, wire_dtype=None)
    tensors = {n: torch.zeros(shape) for n, (shape, _) in SHAPES.items()}
    # bucket 2 holds only "d" (1200 B): its bytes are d's own storage.
    wire = direct_bytes(layout, 2, tensors)
    assert wire.data_ptr() == tensors["d"].data_ptr() and wire.numel() == 1200
    assert direct_bytes(layout, 0, tensors) is None  # two tensors ("a", "b"): must be packed
    tensors["d"] = torch.zeros(600, 2)[:, 0]  # right shape, not contiguous
    assert direct_bytes(layout, 2, tensors) is None
    # bf16 wire, 512 B cap: a+b end at 192, c (400 B) would end at 592 -> bucket 1; d (600 B)
    # alone in bucket 2, but a float32 "d" must be cast, so it is packed.
    bf16 = build_layout(SHAPES, bucket_mb=ONE_KIB_IN_MB / 2, wire_dtype=torch.bfloat16)
    assert [s.name for s in bf16.slots if s.bucket == 2] == ["d"]
    assert direct_bytes(bf16, 2, {n: torch.zeros(s) for n, (s, _) in SHAPES.items()}) is None


def test_int8_wire_quantizes_matrices_per_row_and_sends_vectors_as_they_are():
    shapes = {"m": (torch.Size([4, 100]), F32), "v": (torch.Size([100]), F32)}
    layout = build_layout(shapes, bucket_mb=1.0, wire_dtype=torch.int8)
    # m: 4*100 int8 = 400 B at 0, its 4 float32 row scales (16 B) at align64(400) = 448 -> ends 464.
    # v: a vector, float32 400 B at align64(464) = 512 -> ends 912. On the wire: 400 + 16 + 400 = 816.
    m, v = layout.slots
    assert (m.wire_dtype, m.offset_bytes, m.nbytes, m.scale_nbytes) == (torch.int8, 0, 400, 16)
    assert (v.wire_dtype, v.offset_bytes, v.nbytes) == (F32, 512, 400)
    assert layout.bucket_nbytes == (912,) and layout.total_nbytes == 816

    g = torch.Generator().manual_seed(0)
    row_scales = torch.tensor([1e-3, 1.0, 10.0, 1e3])[:, None]  # rows of very different magnitude
    state = {"m": torch.randn(4, 100, generator=g) * row_scales, "v": torch.randn(100, generator=g)}
    params = {"m": torch.zeros(4, 100), "v": torch.zeros(100)}
    buckets = [torch.empty(n, dtype=torch.uint8) for n in layout.bucket_nbytes]
    pack_bucket(layout, buckets, 0, state)
    unpack_bucket(layout, buckets, 0, params)
    # Per-row step = absmax / 127; rounding errs by at most half a step = absmax / 254
    # (plus float32 rounding of the product: a relative 1e-6 slack).
    half_step = state["m"].abs().amax(dim=1, keepdim=True) / 254
    assert torch.all((params["m"] - state["m"]).abs() <= half_step * (1 + 1e-6))
    assert torch.equal(params["v"], state["v"])


def test_buckets_travel_in_pieces_of_whole_tensors_of_about_an_eighth_of_a_bucket():
    layout = build_layout(SHAPES, bucket_mb=ONE_KIB_IN_MB, wire_dtype=None)
    assert layout.piece_nbytes == 1024 // 8  # 128 B
    # bucket 0: a ends at 64 (< 128 past 0), b ends at 320 (>= 128): one piece [0, 320) = a, b.
    assert [(s, e, [x.name for x in sl]) for s, e, sl in pieces(layout, 0)] == [(0, 320, ["a", "b"])]
    assert [(s, e, [x.name for x in sl]) for s, e, sl in pieces(layout, 2)] == [(0, 1200, ["d"])]
    tiny = build_layout(SHAPES, bucket_mb=2 * ONE_KIB_IN_MB, wire_dtype=None)  # piece 256 B
    # bucket 0 of a 2 KiB layout: a@0-64, b@64-320 -> cut at 320; c@320-1120 -> cut at 1120;
    # d would end at align64(1120)=1152 + 1200 > 2048 -> next bucket.
    assert [(s, e) for s, e, _ in pieces(tiny, 0)] == [(0, 320), (320, 1120)]
