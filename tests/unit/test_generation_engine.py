"""GenerationEngine behaviour: stopping, lengths, determinism, chunking, weight swaps."""
import pytest
import torch

from llamarl_core.generation import Completion, GenerationEngine, SamplingParams
from llamarl_core.models import ByteTokenizer, Llama, ModelArgs

from tiny_models import force_token

ARGS = ModelArgs(vocab_size=260, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=48,
                 max_seq_len=64, rope_theta=10000.0)
TOK = ByteTokenizer()


def _model(seed=0):
    torch.manual_seed(seed)
    return Llama(ARGS).eval()


def test_eos_is_included_with_its_logprob_and_reason_stop():
    model = _model()
    force_token(model, TOK.eos_id)
    [done] = GenerationEngine(model, TOK).generate([[1, 2, 3]], SamplingParams(max_new_tokens=8), seed=0)
    assert done.token_ids == [TOK.eos_id] and done.finish_reason == "stop"
    assert done.logprobs[0] == pytest.approx(0.0, abs=1e-4) and done.text == ""


def test_rows_without_stop_run_to_max_new_tokens_with_reason_length():
    model = _model()
    force_token(model, ord("a"))
    out = GenerationEngine(model, TOK).generate([[1], [5, 6, 7, 8]], SamplingParams(max_new_tokens=5))
    assert [c.token_ids for c in out] == [[97] * 5, [97] * 5]
    assert [c.finish_reason for c in out] == ["length", "length"] and out[0].text == "aaaaa"


def test_stop_token_ids_stop_and_ignore_eos_runs_on():
    model = _model()
    force_token(model, TOK.eos_id)
    engine = GenerationEngine(model, TOK)
    [ran_on] = engine.generate([[1]], SamplingParams(max_new_tokens=3, ignore_eos=True))
    assert ran_on.token_ids == [TOK.eos_id] * 3 and ran_on.finish_reason == "length"
    force_token(model, ord("z"))
    [stopped] = engine.generate([[1]], SamplingParams(max_new_tokens=3, stop_token_ids=(ord("z"),)))
    assert stopped.token_ids == [ord("z")] and stopped.finish_reason == "stop"


def test_stop_string_truncates_text_but_keeps_tokens_through_the_completing_one():
    model = _model()
    force_token(model, ord("a"))
    params = SamplingParams(max_new_tokens=10, stop_strings=("aaa",))
    [out] = GenerationEngine(model, TOK).generate([[1]], params)
    # "a","a","a": the third token completes "aaa"; text before the stop string is "".
    assert out.token_ids == [97, 97, 97] and len(out.logprobs) == 3
    assert out.text == "" and out.finish_reason == "stop"


def test_same_seed_gives_same_samples_and_different_seed_differs():
    model, prompts = _model(), [[1, 2], [3, 4, 5, 6], [7]]
    engine = GenerationEngine(model, TOK)
    params = SamplingParams(max_new_tokens=16, temperature=1.0, ignore_eos=True)
    first, again = engine.generate(prompts, params, seed=7), engine.generate(prompts, params, seed=7)
    other = engine.generate(prompts, params, seed=8)
    assert [c.token_ids for c in first] == [c.token_ids for c in again]
    assert [c.token_ids for c in first] != [c.token_ids for c in other]


def test_batches_larger_than_max_batch_size_are_chunked_and_independent_of_padding():
    model = _model()
    prompts = [[1 + i] * (1 + i % 4) for i in range(5)]
    params = SamplingParams(max_new_tokens=6, temperature=0.0)
    chunked = GenerationEngine(model, TOK, max_batch_size=2).generate(prompts, params)
    alone = [GenerationEngine(model, TOK).generate([p], params)[0] for p in prompts]
    assert len(chunked) == 5 and all(isinstance(c, Completion) for c in chunked)
    assert [c.token_ids for c in chunked] == [c.token_ids for c in alone]
    for a, b in zip(chunked, alone):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0)


def test_in_place_weight_swap_is_seen_by_the_next_generate():
    model, donor = _model(0), _model(1)
    engine = GenerationEngine(model, TOK)
    params = SamplingParams(max_new_tokens=8, temperature=0.0, ignore_eos=True)
    before = engine.generate([[1, 2, 3]], params)[0].token_ids
    model.load_state_dict(donor.state_dict())
    after = engine.generate([[1, 2, 3]], params)[0].token_ids
    assert after == GenerationEngine(donor, TOK).generate([[1, 2, 3]], params)[0].token_ids
    assert after != before


def test_generation_is_clipped_to_max_seq_len_and_overlong_prompts_are_rejected():
    engine = GenerationEngine(_model(), TOK, max_seq_len=10)
    [out] = engine.generate([[1] * 7], SamplingParams(max_new_tokens=50, ignore_eos=True))
    assert len(out.token_ids) == 3 and out.finish_reason == "length"  # 10 slots - 7 prompt
    with pytest.raises(ValueError, match="prompt 1 has 10 tokens"):
        engine.generate([[1], [1] * 10], SamplingParams(max_new_tokens=1))


def test_top_k_one_equals_greedy():
    model, prompts = _model(), [[1, 2], [9, 8, 7]]
    engine = GenerationEngine(model, TOK)
    greedy = engine.generate(prompts, SamplingParams(max_new_tokens=8, temperature=0.0))
    top1 = engine.generate(prompts, SamplingParams(max_new_tokens=8, temperature=1.0, top_k=1), seed=1)
    assert [c.token_ids for c in greedy] == [c.token_ids for c in top1]


def test_invalid_sampling_params_name_the_field():
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(max_new_tokens=1, top_p=0.0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        SamplingParams(max_new_tokens=0)
