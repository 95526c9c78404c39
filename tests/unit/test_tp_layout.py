"""tp_layout: the slice of each full parameter a generator TP rank holds (worked out by hand)."""
import pytest
import torch

from llamarl_core.models import Llama, ModelArgs
from llamarl_core.models.tp_slices import TPSlice, tp_slice
from llamarl_core.transport.tp_layout import shard_state

# dim 8 = 4 heads x head_dim 2; 2 KV heads (2 query heads each); ffn 12; vocab 10.
ARGS = ModelArgs(vocab_size=10, dim=8, n_layers=1, n_heads=4, n_kv_heads=2, ffn_dim=12, max_seq_len=16)
SHAPES = {n: tuple(p.shape) for n, p in Llama(ARGS).named_parameters()}


def tp_slices(tp_rank: int, tp_size: int) -> dict:
    return {n: tp_slice(n, s, ARGS, tp_rank, tp_size) for n, s in SHAPES.items()}


def test_tp2_splits_heads_and_mlp_columns_and_replicates_the_rest():
    s = tp_slices(tp_rank=1, tp_size=2)
    assert s["layers.0.attention.wq.weight"] == TPSlice(0, 4, 8)      # query heads 2, 3
    assert s["layers.0.attention.wk.weight"] == TPSlice(0, 2, 4)      # KV head 1
    assert s["layers.0.attention.wv.weight"] == TPSlice(0, 2, 4)
    assert s["layers.0.attention.wo.weight"] == TPSlice(1, 4, 8)      # wo columns follow wq rows
    assert s["layers.0.feed_forward.w1.weight"] == TPSlice(0, 6, 12)
    assert s["layers.0.feed_forward.w3.weight"] == TPSlice(0, 6, 12)
    assert s["layers.0.feed_forward.w2.weight"] == TPSlice(1, 6, 12)
    assert s["layers.0.attention_norm.weight"] == TPSlice(0, 0, 8)    # replicated: full range
    assert s["tok_embeddings.weight"] == TPSlice(0, 0, 10)
    assert s["output.weight"] == TPSlice(0, 0, 10)
    assert set(s) == set(SHAPES)


def test_tp_beyond_kv_heads_replicates_each_kv_head_on_the_ranks_whose_queries_use_it():
    # tp=4, 2 KV heads: ranks 0,1 hold query heads 0,1 (group of KV head 0); ranks 2,3 KV head 1.
    wk = [tp_slice("layers.0.attention.wk.weight", SHAPES["layers.0.attention.wk.weight"], ARGS, r, 4)
          for r in range(4)]
    assert wk == [TPSlice(0, 0, 2), TPSlice(0, 0, 2), TPSlice(0, 2, 4), TPSlice(0, 2, 4)]
    wq = [tp_slice("layers.0.attention.wq.weight", (8, 8), ARGS, r, 4) for r in range(4)]
    assert wq == [TPSlice(0, 2 * r, 2 * r + 2) for r in range(4)]


def test_sharded_slices_of_every_rank_reassemble_the_full_tensor():
    full = {n: torch.randn(s) for n, s in SHAPES.items()}
    shards = [shard_state(full, ARGS, r, 2) for r in range(2)]
    for name, t in full.items():
        s = tp_slice(name, t.shape, ARGS, 0, 2)
        if s.size == t.shape[0] and s.dim == 0:
            assert all(torch.equal(sh[name], t) for sh in shards)
        else:
            assert torch.equal(torch.cat([sh[name] for sh in shards], dim=s.dim), t)


def test_sizes_that_do_not_divide_are_refused_naming_the_numbers():
    with pytest.raises(ValueError, match="tp=3 does not divide the model's 4 attention heads"):
        tp_slices(0, 3)
    with pytest.raises(ValueError, match=r"tp_rank=2 is not in \[0, 2\)"):
        tp_slice("layers.0.attention.wq.weight", (8, 8), ARGS, 2, 2)
