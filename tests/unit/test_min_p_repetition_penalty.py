"""generation.min_p and generation.repetition_penalty: the one sampling function equals HF's
processors on the same logits, the engine's draws obey them, and the trainer's π of the
engine's tokens is their μ (the same lines on the same logits, seen-token sets included)."""
import math
import re

import pytest
import torch
from transformers.generation.logits_process import (MinPLogitsWarper, RepetitionPenaltyLogitsProcessor,
                                                    TemperatureLogitsWarper)

from llamarl_cli.main import main
from llamarl_core.config.errors import ConfigError
from llamarl_core.config.load import load_config
from llamarl_core.config.schema import GenerationConfig
from llamarl_core.generation import GenerationEngine
from llamarl_core.generation.params import SamplingParams
from llamarl_core.generation.sampling import (chunked_policy_logprobs, first_positions, penalize, sample_next,
                                              sampling_logprobs)
from llamarl_core.models import ByteTokenizer, Llama, ModelArgs

V = 50


def _seen(ids: torch.Tensor, vocab: int) -> torch.Tensor:
    """bool [B, V]: every token of each row of ids [B, L]."""
    return first_positions(ids, vocab) < ids.shape[1]


def test_the_penalty_equals_hfs_repetition_penalty_processor():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, V, generator=g) * 3                    # both signs
    ids = torch.randint(0, V, (3, 12), generator=g)
    for penalty in (1.3, 0.7):
        want = RepetitionPenaltyLogitsProcessor(penalty)(ids, logits.clone())
        torch.testing.assert_close(penalize(logits, _seen(ids, V), penalty), want, atol=0, rtol=0)


def test_penalty_min_p_and_temperature_equal_hfs_processor_chain():
    # HF: repetition penalty, temperature, min-p (HF's own order for these three; vLLM's too)
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(4, V, generator=g) * 3
    ids = torch.randint(0, V, (4, 20), generator=g)
    scores = RepetitionPenaltyLogitsProcessor(1.2)(ids, logits.clone())
    scores = MinPLogitsWarper(0.1)(ids, TemperatureLogitsWarper(0.8)(ids, scores))
    want = torch.log_softmax(scores, dim=-1)                       # -inf where min-p cut
    every = torch.arange(V).expand(4, V)
    _, got = sampling_logprobs(logits[:, None].expand(4, V, V), 0.8, 0, 1.0, 0.1, 1.2,
                               _seen(ids, V)[:, None].expand(4, V, V), tokens=every)  # [4, V]: each token's score
    kept = torch.isfinite(want)
    assert 0 < int(kept.sum()) < 4 * V                             # min-p really cuts
    torch.testing.assert_close(got[kept], want[kept], atol=1e-5, rtol=0)
    # a cut token is scored log p_T(t) - log(kept mass): below every kept token's score
    assert (got.masked_fill(kept, math.inf).amin(-1) < got.masked_fill(~kept, -math.inf).amax(-1)).all()


def test_drawn_tokens_respect_min_p_and_report_the_renormalised_log_prob():
    # p = 0.5, 0.3, 0.15, 0.05; min_p 0.2 -> threshold 0.2 x 0.5 = 0.1: token 3 goes, the rest
    # renormalise over 0.95
    logits = torch.tensor([0.5, 0.3, 0.15, 0.05]).log().expand(4000, 4)
    params = SamplingParams(max_new_tokens=1, min_p=0.2)
    tokens, logp = sample_next(logits, params, torch.Generator().manual_seed(0))
    assert set(tokens.tolist()) == {0, 1, 2}
    want = (torch.tensor([0.5, 0.3, 0.15]) / 0.95).log()[tokens]
    torch.testing.assert_close(logp, want)


def test_top_p_counts_the_mass_min_p_left_as_vllm_does():
    # p = 0.5, 0.3, 0.15, 0.05; min-p 0.2 keeps 0.5/0.3/0.15 (-> 0.526, 0.316, 0.158); top-p 0.8:
    # mass before the third is 0.842 > 0.8, so it goes. (HF's order, top-p on the whole first:
    # mass before the third is 0.8, kept, and 0, 1, 2 would all be drawn.)
    logits = torch.tensor([0.5, 0.3, 0.15, 0.05]).log().expand(4000, 4)
    tokens, logp = sample_next(logits, SamplingParams(1, top_p=0.8, min_p=0.2), torch.Generator().manual_seed(0))
    assert set(tokens.tolist()) == {0, 1}
    torch.testing.assert_close(logp, (torch.tensor([0.5, 0.3]) / 0.8).log()[tokens])


def test_the_repetition_penalty_lowers_a_seen_tokens_probability_by_hand():
    # raw logits 2, 1, -1; penalty 2 on seen tokens 0 and 2 -> 1, 1, -2: token 0 falls from
    # e^2 / (e^2 + e + e^-1) to e / (2e + e^-2); the unseen token 1 rises
    logits = torch.tensor([[2.0, 1.0, -1.0]]).expand(6000, 3)
    seen = torch.tensor([[True, False, True]]).expand(6000, 3)
    tokens, logp = sample_next(logits, SamplingParams(1, repetition_penalty=2.0), torch.Generator().manual_seed(0),
                               seen)
    z = torch.tensor([1.0, 1.0, -2.0])
    torch.testing.assert_close(logp, torch.log_softmax(z, 0)[tokens])
    share0 = float((tokens == 0).double().mean())
    assert abs(share0 - math.e / (2 * math.e + math.exp(-2))) < 0.02 and share0 < 0.6  # unpenalised: 0.71


def test_the_trainers_chunked_penalty_sees_each_positions_own_prefix():
    # by hand, position by position: seen at hidden position i = tokens[:, :start + i + 1]
    g = torch.Generator().manual_seed(2)
    B, L, D, start = 2, 9, 8, 3
    tokens = torch.randint(0, 12, (B, L), generator=g)            # a small id range: repeats
    hidden = torch.randn(B, L, D, generator=g)
    head = torch.nn.Linear(D, 12, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.randn(12, D, generator=g))         # seeded, not the global RNG's
        got, _, _ = chunked_policy_logprobs(hidden[:, start:-1], head, tokens[:, start + 1:], 0.9, 0, 1.0,
                                            chunk_bytes=B * 12 * 4 * 2, min_p=0.05, repetition_penalty=1.5,
                                            seen_from=first_positions(tokens, 12) - start)
        want = torch.stack([sampling_logprobs(head(hidden[:, p]), 0.9, 0, 1.0, 0.05, 1.5,
                                              _seen(tokens[:, :p + 1], 12), tokens=tokens[:, p + 1])[1]
                            for p in range(start, L - 1)], dim=1)
        plain, _, _ = chunked_policy_logprobs(hidden[:, start:-1], head, tokens[:, start + 1:], 0.9, 0, 1.0)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
    assert (got - plain).abs().max() > 0.1                         # the penalty changed something


def test_each_option_changes_the_distribution_so_the_kl_takes_the_untruncated_path():
    assert not GenerationConfig().changes_distribution()
    for kwargs in ({"top_k": 5}, {"top_p": 0.9}, {"min_p": 0.05}, {"repetition_penalty": 1.1},
                   {"repetition_penalty": 0.9}):
        assert GenerationConfig(**kwargs).changes_distribution(), kwargs


@pytest.mark.parametrize("override,message", [
    ("generation.min_p=1.0", "generation.min_p=1.0 must be in [0, 1)"),
    ("generation.min_p=-0.1", "generation.min_p=-0.1 must be in [0, 1)"),
    ("generation.repetition_penalty=0", "generation.repetition_penalty=0.0 must be > 0"),
    ("generation.repetition_penalty=-1.1", "generation.repetition_penalty=-1.1 must be > 0")])
def test_invalid_values_are_refused_naming_the_key(override, message, capsys):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config("cpu_tiny", [override])
    assert main(["plan", override]) == 2
    assert message in capsys.readouterr().err


def test_the_plan_accepts_both_options(capsys):
    assert main(["plan", "generation.min_p=0.1", "generation.repetition_penalty=1.1"]) == 0, capsys.readouterr().err


ARGS = ModelArgs(vocab_size=260, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96,
                 max_seq_len=96, rope_theta=10000.0)
TOK = ByteTokenizer()
# groups of 4 copies (prefilled once); 1 in 8 byte values ends a row, so rows end at different
# steps: continuous batching refills freed slots and static batching compacts
GROUPS = [TOK.encode(t, add_bos=True) for t in ("aaaa bbbb: 12+34=", "q", "mid len") for _ in range(4)]
PENALISED = SamplingParams(max_new_tokens=20, temperature=1.0, min_p=0.02, repetition_penalty=3.0,
                           stop_token_ids=tuple(range(0, 256, 8)), ignore_eos=True)


@pytest.mark.parametrize("batching,batch_size", [("continuous", 5), ("static", 5)])
def test_each_engine_row_is_penalised_by_its_own_prompt_and_tokens_whoever_shares_its_step(batching, batch_size):
    torch.manual_seed(1)
    model = Llama(ARGS).eval().requires_grad_(False)
    alone = GenerationEngine(model, TOK, max_batch_size=1).generate(GROUPS, PENALISED, seed=9)
    shared = GenerationEngine(model, TOK, max_batch_size=batch_size, batching=batching).generate(
        GROUPS, PENALISED, seed=9)
    assert [c.token_ids for c in shared] == [c.token_ids for c in alone]
    for prompt, c in zip(GROUPS, shared):  # μ by the definition: the full forward, each position's own prefix
        ids = torch.tensor([prompt + c.token_ids])
        logits = model(ids)[0, len(prompt) - 1:-1]                            # [n, V]
        seen = torch.stack([_seen(ids[:, :len(prompt) + i], ARGS.vocab_size)[0] for i in range(len(c.token_ids))])
        _, want = sampling_logprobs(logits, 1.0, 0, 1.0, 0.02, 3.0, seen, tokens=ids[0, len(prompt):])
        torch.testing.assert_close(torch.tensor(c.logprobs), want, atol=1e-5, rtol=0)
    plain = GenerationEngine(model, TOK, max_batch_size=batch_size, batching=batching).generate(
        GROUPS, SamplingParams(20, 1.0, stop_token_ids=PENALISED.stop_token_ids, ignore_eos=True), seed=9)
    assert [c.token_ids for c in plain] != [c.token_ids for c in shared]     # the options changed the draws
