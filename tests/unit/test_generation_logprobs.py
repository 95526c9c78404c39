"""The engine's sampled-token log-probs equal the trainer's recomputation (μ == π on-policy)."""
import pytest
import torch

from llamarl_core.generation import GenerationEngine, SamplingParams
from llamarl_core.generation.sampling import sampling_logprobs
from llamarl_core.models import ByteTokenizer, Llama, ModelArgs

ARGS = ModelArgs(vocab_size=260, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96,
                 max_seq_len=128, rope_theta=10000.0)


def _model():
    torch.manual_seed(0)
    model = Llama(ARGS).eval()
    model.reset_parameters(std=0.2)  # peaked distributions so sampling is not near-uniform
    return model


def trainer_logprobs(model, prompts, completions, temperature, top_k=0, top_p=1.0):
    """What the trainer computes: right-padded prompt+completion rows, positions from 0."""
    rows = [p + c.token_ids for p, c in zip(prompts, completions)]
    ids = torch.full((len(rows), max(map(len, rows))), ByteTokenizer.pad_id)
    for i, row in enumerate(rows):
        ids[i, :len(row)] = torch.tensor(row)
    with torch.no_grad():
        _, logp = sampling_logprobs(model(ids)[:, :-1], temperature, top_k, top_p, tokens=ids[:, 1:])  # [B, L-1]
    # Completion token j of row i sits at ids[i, len(p)+j], predicted from position len(p)+j-1.
    return [logp[i, len(p) - 1:len(p) - 1 + len(c.token_ids)] for i, (p, c) in
            enumerate(zip(prompts, completions))]


@pytest.mark.parametrize("temperature,top_p,top_k", [(1.0, 1.0, 0), (0.7, 0.9, 0), (1.3, 1.0, 20), (0.7, 0.9, 20)])
def test_engine_logprobs_equal_trainer_logprobs_for_prompts_of_different_lengths(temperature, top_p, top_k):
    model, tok = _model(), ByteTokenizer()
    prompts = [tok.encode(t, add_bos=True) for t in ("hi", "a much longer prompt here", "mid size")]
    params = SamplingParams(max_new_tokens=24, temperature=temperature, top_p=top_p, top_k=top_k)
    completions = GenerationEngine(model, tok).generate(prompts, params, seed=3)
    assert len({len(p) for p in prompts}) == 3
    for completion, ref in zip(completions, trainer_logprobs(model, prompts, completions, temperature,
                                                                   top_k, top_p)):
        assert len(completion.logprobs) == len(completion.token_ids) > 0
        torch.testing.assert_close(torch.tensor(completion.logprobs), ref, atol=1e-5, rtol=0)


def test_greedy_tokens_are_argmax_of_full_forward_and_logprobs_use_temperature_one():
    model, tok = _model(), ByteTokenizer()
    prompts = [tok.encode("x", add_bos=True), tok.encode("longer prompt", add_bos=True)]
    params = SamplingParams(max_new_tokens=12, temperature=0.0, ignore_eos=True)
    completions = GenerationEngine(model, tok).generate(prompts, params)
    refs = trainer_logprobs(model, prompts, completions, 1.0)
    for prompt, completion, ref in zip(prompts, completions, refs):
        ids = torch.tensor([prompt + completion.token_ids])
        with torch.no_grad():
            argmax = model(ids)[0, len(prompt) - 1:-1].argmax(-1)
        assert argmax.tolist() == completion.token_ids
        torch.testing.assert_close(torch.tensor(completion.logprobs), ref, atol=1e-5, rtol=0)


def test_rows_finishing_early_are_compacted_away_without_changing_any_row(monkeypatch):
    from llamarl_core.generation.forward import SlotCache

    compactions = []
    original = SlotCache.move
    monkeypatch.setattr(SlotCache, "move",
                        lambda self, src, dst, filled: (compactions.append(len(src)), original(self, src, dst, filled)))
    model, tok = _model(), ByteTokenizer()
    prompts = [tok.encode(t, add_bos=True) for t in ("a", "bb", "a longer one", "x y", "z", "mid len")]
    # A third of all byte values stop a row, so rows end at different steps.
    params = SamplingParams(max_new_tokens=20, temperature=1.0, stop_token_ids=tuple(range(0, 256, 3)))
    completions = GenerationEngine(model, tok).generate(prompts, params, seed=5)
    assert compactions and len({len(c.token_ids) for c in completions}) > 2
    for completion, ref in zip(completions, trainer_logprobs(model, prompts, completions, 1.0)):
        torch.testing.assert_close(torch.tensor(completion.logprobs), ref, atol=1e-5, rtol=0)
    greedy = SamplingParams(max_new_tokens=20, temperature=0.0, stop_token_ids=tuple(range(0, 256, 3)))
    engine = GenerationEngine(model, tok)
    together = engine.generate(prompts, greedy)
    assert [c.token_ids for c in together] == [engine.generate([p], greedy)[0].token_ids for p in prompts]
