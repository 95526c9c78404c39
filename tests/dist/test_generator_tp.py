"""Generator tensor parallelism (CPU twin on gloo): a TP = 2 replica samples what TP = 1 does,
for Llama and for the families with extra per-head tensors (Qwen2's q/k/v biases split with
their rows; Qwen3's q/k norms whole on both ranks, head_dim 32 != 64 / 4).

Reference: the same engine on the unsharded model, run on each rank. Rows stop at different
steps (a third of the vocabulary are stop tokens), so padding, early stops and batch
compaction all run under TP. All cases share one 2-process world (starting it is the cost).
"""
import pytest
import torch
import torch.distributed as dist

from llamarl_core.generation import GenerationEngine, SamplingParams
from llamarl_core.models import ByteTokenizer, Llama, ModelArgs
from llamarl_core.transport.tensor_parallel import make_token_sync, new_replica_groups, shard_model_

MODELS = {  # 4 query heads; KV heads split (2 -> 1 per rank) or replicated (1 on both ranks)
    "gqa": ModelArgs(vocab_size=260, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96,
                     max_seq_len=64, rope_theta=10000.0),
    "kv_replicated": ModelArgs(vocab_size=260, dim=64, n_layers=2, n_heads=4, n_kv_heads=1,
                               ffn_dim=96, max_seq_len=64, rope_theta=10000.0),
    "qwen2_bias": ModelArgs(vocab_size=260, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96,
                            max_seq_len=64, rope_theta=10000.0, family="qwen2", qkv_bias=True),
    "qwen3_qk_norm": ModelArgs(vocab_size=260, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96,
                               max_seq_len=64, rope_theta=10000.0, family="qwen3", qk_norm=True,
                               decoupled_head_dim=32),
}
PROMPTS = [[257, 72, 105], [257, 50, 43, 50, 61, 63, 10], [257, 1], [257, 9, 9, 9, 9]]
STOPS = tuple(range(0, 260, 3))
CASES = {
    "greedy": SamplingParams(max_new_tokens=12, temperature=0.0, stop_token_ids=STOPS),
    "sampled": SamplingParams(max_new_tokens=12, temperature=1.0, top_p=0.9, stop_token_ids=STOPS),
}


def _outputs(engine, params):
    outs = engine.generate(PROMPTS, params, seed=1234)
    return [(c.token_ids, c.logprobs, c.finish_reason) for c in outs]


def _seeded(args):
    """The same random model on every call; biases and q/k norms random too (init has 0 and 1)."""
    torch.manual_seed(0)
    model = Llama(args).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias") or "q_norm" in name or "k_norm" in name:
                p.copy_(torch.randn(p.shape) * 0.2 + (1.0 if "norm" in name else 0.0))
    return model


def _tp_body(rank, world_size, store):
    group = new_replica_groups(list(range(world_size)), world_size)
    results = {}
    for model_name, args in MODELS.items():
        full = _seeded(args)
        sharded = shard_model_(_seeded(args), rank, world_size, group)
        ref = GenerationEngine(full, ByteTokenizer(), max_batch_size=8)
        tp = GenerationEngine(sharded, ByteTokenizer(), max_batch_size=8,
                              token_sync=make_token_sync(group, src_global_rank=0))
        for case, params in CASES.items():
            results[model_name, case] = {"tp1": _outputs(ref, params), "tp2": _outputs(tp, params)}
        results[model_name, "local_kv_heads"] = sharded.local_kv_heads()
        results[model_name, "wq_rows"] = sharded.layers[0].attention.wq.weight.shape[0]
    return results


@pytest.fixture(scope="module")
def results(run_workers):
    return run_workers(_tp_body, 2, timeout_s=120)


def _assert_same(tp2, tp1, tol=1e-5):
    assert [t for t, _, _ in tp2] == [t for t, _, _ in tp1]
    assert [r for _, _, r in tp2] == [r for _, _, r in tp1]
    for (_, lp2, _), (_, lp1, _) in zip(tp2, tp1):
        assert lp2 == pytest.approx(lp1, abs=tol)


@pytest.mark.parametrize("model_name", list(MODELS))
def test_tp2_generator_gives_the_greedy_tokens_and_logprobs_of_tp1(results, model_name):
    for rank_results in results:
        out = rank_results[model_name, "greedy"]
        _assert_same(out["tp2"], out["tp1"])
    lengths = {len(t) for t, _, _ in results[0][model_name, "greedy"]["tp1"]}
    assert len(lengths) > 1, "rows should stop at different steps (compaction path)"


@pytest.mark.parametrize("model_name", list(MODELS))
def test_sampled_tp2_matches_tp1_given_the_same_seed(results, model_name):
    for rank_results in results:
        out = rank_results[model_name, "sampled"]
        _assert_same(out["tp2"], out["tp1"])


def test_each_rank_holds_half_the_query_heads_and_its_share_of_kv_heads(results):
    for rank_results in results:
        assert rank_results["gqa", "wq_rows"] == 2 * 16  # 2 of 4 heads x head_dim 16
        assert rank_results["gqa", "local_kv_heads"] == 1
        assert rank_results["kv_replicated", "local_kv_heads"] == 1


def test_both_tp_ranks_of_a_replica_return_identical_completions(results):
    for key in results[0]:
        if isinstance(results[0][key], dict):
            assert results[0][key]["tp2"] == results[1][key]["tp2"]
