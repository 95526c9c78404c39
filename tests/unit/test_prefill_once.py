"""Prefill once per group: a group's G samples start from one prefill's KV, and what they
sample (tokens, μ) is what G separate prefills give, with the same seed. Exact on tokens
because each sample's noise is keyed by (seed, sample, token index), not by the batch row."""
import pytest
import torch

from llamarl_core.generation import GenerationEngine, SamplingParams, prefill_once, scheduler
from llamarl_core.generation.sampling import row_seed, sample_next
from llamarl_core.models import ByteTokenizer, Llama, ModelArgs

ARGS = ModelArgs(vocab_size=260, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96,
                 max_seq_len=96, rope_theta=10000.0)
TOK = ByteTokenizer()
G = 4
DISTINCT = [TOK.encode(t, add_bos=True) for t in ("a shared system prompt: 12+34=", "q", "mid len")]
GROUPS = [p for p in DISTINCT for _ in range(G)]  # what ChunkGenerator passes: G copies each
# 1 in 8 byte values ends a row: lengths vary, so groups straddle continuous admissions
PARAMS = SamplingParams(max_new_tokens=20, temperature=1.0, stop_token_ids=tuple(range(0, 256, 8)),
                        ignore_eos=True)


def _model(seed=0):
    torch.manual_seed(seed)
    return Llama(ARGS).eval().requires_grad_(False)


def _prefilled_rows(monkeypatch) -> list[int]:
    rows = []
    original = prefill_once.prefill

    def spy(model, proj, cache, ids, lengths, slots, start=0):
        rows.append(ids.shape[0])
        return original(model, proj, cache, ids, lengths, slots, start=start)
    monkeypatch.setattr(prefill_once, "prefill", spy)
    original_step = scheduler.step

    def step_spy(model, proj, cache, decode_rows=None, prefill_rows=None):  # a prefill joined to a decode step
        if prefill_rows is not None:
            rows.append(prefill_rows[0].shape[0])
        return original_step(model, proj, cache, decode_rows=decode_rows, prefill_rows=prefill_rows)
    monkeypatch.setattr(scheduler, "step", step_spy)
    return rows


def _run(model, once: bool, batching: str, batch_size: int, monkeypatch, between_steps=None, seed=3):
    rows = _prefilled_rows(monkeypatch)
    engine = GenerationEngine(model, TOK, max_batch_size=batch_size, batching=batching, prefill_once=once)
    out = engine.stream(GROUPS, PARAMS, seed=seed, between_steps=between_steps)
    return out, list(rows), engine.last_stats


@pytest.mark.parametrize("batching,batch_size", [("continuous", 5), ("static", 5), ("continuous", 12)])
def test_a_group_prefilled_once_samples_what_separate_prefills_sample(batching, batch_size, monkeypatch):
    model = _model()
    once, once_rows, once_stats = _run(model, True, batching, batch_size, monkeypatch)
    each, each_rows, each_stats = _run(model, False, batching, batch_size, monkeypatch)
    assert [o.token_ids.tolist() for o in once] == [e.token_ids.tolist() for e in each]
    assert [o.finish_reason for o in once] == [e.finish_reason for e in each]
    for o, e in zip(once, each):
        torch.testing.assert_close(o.logprobs, e.logprobs, atol=1e-5, rtol=0)
    assert sum(each_rows) == len(GROUPS) and each_stats["prefill_tokens"] == each_stats["prompt_tokens"]
    assert sum(once_rows) < sum(each_rows)
    assert once_stats["prefill_tokens"] + once_stats["shared_tokens"] == once_stats["prompt_tokens"]
    if batch_size == len(GROUPS):  # everything admitted at once: each distinct prompt exactly once
        assert once_rows == [len(DISTINCT)]
    # the G samples of a group share a prefill but not their noise: they differ
    for g in range(len(DISTINCT)):
        assert len({tuple(o.token_ids.tolist()) for o in once[g * G:(g + 1) * G]}) > 1


def test_a_member_admitted_after_its_siblings_takes_the_prompt_kv_a_slot_still_holds(monkeypatch):
    model = _model()
    # batch 5 over 3 groups of 4: groups straddle admissions; with seed 0's lengths every
    # later member finds its prompt's KV in a slot (a running sibling's, copied, or the freed
    # slot it lands in, left by a sibling that ended), so no prompt is prefilled twice (with
    # seed 3's, all of a group's running members end before its last is admitted: one more prefill)
    once, rows, stats = _run(model, True, "continuous", 5, monkeypatch, seed=0)
    assert sum(rows) == len(DISTINCT) and len(rows) > 1
    assert stats["prefill_tokens"] == sum(len(p) for p in DISTINCT)
    assert stats["shared_tokens"] == sum(len(p) for p in GROUPS) - stats["prefill_tokens"]


def test_a_compacted_slot_is_known_to_hold_what_was_moved_into_it(monkeypatch):
    # Static batches of 4 with [A, B, C, D, A]: A, B and C (23-token prompts, so a 7-token cap
    # under max_seq_len=30) end together, D runs on and compaction moves it from slot 3 to
    # slot 0. The second batch puts A's second member into slot 0: the KV there is now D's,
    # so A must be prefilled again (believing slot 0 still held A would decode A from D's KV).
    model = _model(2)
    long = [TOK.encode(f"a long prompt number {i}", add_bos=True) for i in range(3)]
    prompts = long + [TOK.encode("d", add_bos=True), long[0]]
    params = SamplingParams(max_new_tokens=12, temperature=1.0, ignore_eos=True)
    runs = {}
    for once in (True, False):
        rows = _prefilled_rows(monkeypatch)
        engine = GenerationEngine(model, TOK, max_batch_size=4, max_seq_len=30, batching="static",
                                  prefill_once=once)
        runs[once] = (engine.stream(prompts, params, seed=1), list(rows))
    (once, rows), (each, _) = runs[True], runs[False]
    assert [len(o.token_ids) for o in once] == [30 - len(long[0])] * 3 + [12, 30 - len(long[0])]
    assert rows == [4, 1]
    for o, e in zip(once, each):
        assert o.token_ids.tolist() == e.token_ids.tolist()
        torch.testing.assert_close(o.logprobs, e.logprobs, atol=1e-5, rtol=0)


def test_after_a_weight_swap_a_later_member_is_prefilled_under_the_new_weights(monkeypatch):
    donor = _model(5).state_dict()

    def swapper(model):
        calls = []

        def between_steps():
            calls.append(1)
            if len(calls) == 3:  # while the straddling group's first members run
                with torch.no_grad():
                    for name, p in model.named_parameters():
                        p.copy_(donor[name])
                return 1
            return None
        return between_steps
    runs = {}
    for once in (True, False):
        model = _model()
        runs[once] = _run(model, once, "continuous", 5, monkeypatch, between_steps=swapper(model))
    (once, rows, _), (each, _, _) = runs[True], runs[False]
    assert [o.token_ids.tolist() for o in once] == [e.token_ids.tolist() for e in each]
    for o, e in zip(once, each):
        assert o.policy_versions == e.policy_versions
        torch.testing.assert_close(o.logprobs, e.logprobs, atol=1e-5, rtol=0)
    assert {o.policy_versions[0] for o in once[G:2 * G]} == {0, 1}  # the group straddled the swap
    assert sum(rows) > len(DISTINCT)  # its members after the swap were prefilled again


def test_a_sample_draws_the_same_tokens_whatever_rows_share_its_step():
    model = _model(1)
    alone = GenerationEngine(model, TOK, max_batch_size=1).generate(GROUPS, PARAMS, seed=9)
    together = GenerationEngine(model, TOK, max_batch_size=8).generate(GROUPS, PARAMS, seed=9)
    assert [c.token_ids for c in alone] == [c.token_ids for c in together]
    other_seed = GenerationEngine(model, TOK, max_batch_size=8).generate(GROUPS, PARAMS, seed=10)
    assert [c.token_ids for c in other_seed] != [c.token_ids for c in together]


def test_row_seeded_noise_draws_from_the_distribution_and_ignores_its_neighbours():
    # probabilities 0.5, 0.3, 0.15, 0.05; 4000 samples, one seed each: sd of a share ~0.008
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log().expand(4000, 4)
    params = SamplingParams(max_new_tokens=1)
    tokens, logp = sample_next(logits, params, [row_seed(0, j, 0) for j in range(4000)])
    share = torch.bincount(tokens, minlength=4).float() / 4000
    assert (share - torch.tensor([0.5, 0.3, 0.15, 0.05])).abs().max() < 0.03
    torch.testing.assert_close(logp, logits[0, tokens])
    # row 7's token is a function of its own logits and seed, not of the rows beside it
    mixed = torch.randn(8, 4)
    tok8, _ = sample_next(mixed, params, [row_seed(1, j, 2) for j in range(8)])
    tok1, _ = sample_next(mixed[7:], params, [row_seed(1, 7, 2)])
    assert tok8[7] == tok1[0]
    assert len({row_seed(0, j, t) for j in range(50) for t in range(50)}) == 2500


SYSTEM = TOK.encode("<system>Be brief.</system><user>", add_bos=True)  # 32 tokens every prompt starts with
TASKS = [SYSTEM + TOK.encode(t) for t in ("1+2=", "30+4=", "what is 7*6?", "x")]


@pytest.mark.parametrize("batching", ["continuous", "static"])
def test_different_prompts_with_a_common_start_prefill_it_once_and_sample_what_separate_prefills_do(
        batching, monkeypatch):
    model = _model()
    runs = {}
    for once in (True, False):
        rows = _prefilled_rows(monkeypatch)
        engine = GenerationEngine(model, TOK, max_batch_size=8, batching=batching, prefill_once=once)
        runs[once] = engine.stream(TASKS, PARAMS, seed=5), list(rows), engine.last_stats
    (shared, shared_rows, stats), (each, each_rows, each_stats) = runs[True], runs[False]
    assert each_rows == [len(TASKS)] and shared_rows == [1, len(TASKS)]  # the prefix, then the rests
    assert each_stats["prefill_tokens"] == sum(map(len, TASKS))
    assert stats["prefill_tokens"] == sum(map(len, TASKS)) - (len(TASKS) - 1) * len(SYSTEM)
    assert stats["shared_tokens"] == (len(TASKS) - 1) * len(SYSTEM)
    for a, b in zip(shared, each):
        assert a.token_ids.tolist() == b.token_ids.tolist()
        torch.testing.assert_close(a.logprobs, b.logprobs, atol=1e-5, rtol=0)


def test_a_prefix_prefilled_once_decodes_the_full_forwards_greedy_tokens():
    torch.manual_seed(0)
    model = Llama(ARGS).eval().requires_grad_(False)
    model.reset_parameters(std=0.2)  # peaked distributions: no near-ties in the argmax
    params = SamplingParams(max_new_tokens=8, temperature=0.0, ignore_eos=True)
    done = GenerationEngine(model, TOK, max_batch_size=8).generate(TASKS, params)
    for prompt, completion in zip(TASKS, done):
        with torch.no_grad():
            logits = model(torch.tensor([prompt + completion.token_ids]))[0, len(prompt) - 1:-1]
        assert logits.argmax(-1).tolist() == completion.token_ids
        torch.testing.assert_close(torch.tensor(completion.logprobs),
                                   torch.log_softmax(logits, -1).max(-1).values, atol=1e-5, rtol=0)


def test_the_shared_prefix_leaves_every_prompt_a_token_of_its_own_and_needs_min_shared_prefix():
    plan = prefill_once.GroupPrefill([SYSTEM + [7], SYSTEM + [7, 9], SYSTEM[:5] + [1] * 30, SYSTEM + [8]])
    assert plan._shared_prefix([0, 1]) == len(SYSTEM)  # prompt 0 keeps its last token
    assert plan._shared_prefix([0, 3]) == len(SYSTEM)
    assert plan._shared_prefix([0, 1, 3]) == len(SYSTEM)
    assert plan._shared_prefix([0, 2]) == 0  # 5 < MIN_SHARED_PREFIX
    assert plan._shared_prefix([1, 1]) == len(SYSTEM) + 1
