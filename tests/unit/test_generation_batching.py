"""Continuous batching: same answers as static batching, clean refilled slots, groups handed
over as soon as they end, fewer decode steps on a long tail, weight swaps between steps."""
import torch

from llamarl_core.config.load import load_config
from llamarl_core.executors.chunks import ChunkGenerator
from llamarl_core.executors.pipeline import chunk_config
from llamarl_core.executors.setup import PromptSet
from llamarl_core.generation import GenerationEngine, SamplingParams
from llamarl_core.generation import prefill_once, scheduler
from llamarl_core.models import ByteTokenizer, Llama, ModelArgs
from fake_link import receive
from llamarl_core.wire.assembly import ChunkAssembly

ARGS = ModelArgs(vocab_size=260, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96,
                 max_seq_len=96, rope_theta=10000.0)
TOK = ByteTokenizer()
PROMPTS = [TOK.encode(t, add_bos=True) for t in
           ("a", "bb", "a longer prompt", "x y", "z", "mid len", "12+34=", "q", "the end")]
STOPS = tuple(range(0, 256, 3))  # a third of the byte values end a row: lengths vary


def _model(seed=0):
    torch.manual_seed(seed)
    return Llama(ARGS).eval().requires_grad_(False)


def _record_admissions(monkeypatch) -> list[list[int]]:
    admitted = []
    original = prefill_once.prefill

    def note(slots, start):
        if start:  # the rest of prompts whose shared prefix the call before prefilled in one slot
            admitted[-1] = slots.tolist()
        else:
            admitted.append(slots.tolist())

    def spy(model, proj, cache, ids, lengths, slots, start=0):
        note(slots, start)
        return original(model, proj, cache, ids, lengths, slots, start=start)
    monkeypatch.setattr(prefill_once, "prefill", spy)
    original_step = scheduler.step

    def step_spy(model, proj, cache, decode_rows=None, prefill_rows=None):  # a prefill joined to a decode step
        if prefill_rows is not None:
            note(prefill_rows[2], prefill_rows[3])
        return original_step(model, proj, cache, decode_rows=decode_rows, prefill_rows=prefill_rows)
    monkeypatch.setattr(scheduler, "step", step_spy)
    return admitted


def test_continuous_and_static_batching_give_the_same_greedy_completions_and_logprobs(monkeypatch):
    model = _model()
    params = SamplingParams(max_new_tokens=24, temperature=0.0, stop_token_ids=STOPS)
    admitted = _record_admissions(monkeypatch)
    continuous = GenerationEngine(model, TOK, max_batch_size=3).generate(PROMPTS, params)
    assert len(admitted) > 3  # slots were refilled one by one, not in batches of 3
    static = GenerationEngine(model, TOK, max_batch_size=3, batching="static").generate(PROMPTS, params)
    assert len({len(c.token_ids) for c in static}) > 2
    assert [c.token_ids for c in continuous] == [c.token_ids for c in static]
    assert [c.finish_reason for c in continuous] == [c.finish_reason for c in static]
    for a, b in zip(continuous, static):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0)


def test_a_refilled_slot_attends_to_nothing_its_previous_occupant_left(monkeypatch):
    model = _model(1)
    params = SamplingParams(max_new_tokens=20, temperature=0.0, stop_token_ids=STOPS)
    engine = GenerationEngine(model, TOK, max_batch_size=2)
    cache = engine.slot_cache(2, 64)
    for buf in cache.k + cache.v:
        buf.fill_(1e4)  # anything read from beyond a sequence's own length would show
    admitted = _record_admissions(monkeypatch)
    shared = engine.generate(PROMPTS, params)
    slots = [s for batch in admitted for s in batch]
    assert len(slots) == len(PROMPTS) and len(set(slots)) == 2  # two slots served nine prompts
    for prompt, got in zip(PROMPTS, shared):
        [alone] = GenerationEngine(_model(1), TOK).generate([prompt], params)
        assert got.token_ids == alone.token_ids
        torch.testing.assert_close(torch.tensor(got.logprobs), torch.tensor(alone.logprobs),
                                   atol=1e-5, rtol=0)


def test_each_prompt_group_is_handed_over_the_moment_its_last_sample_ends():
    cfg = load_config("cpu_tiny", ["algorithm.group_size=3", "algorithm.prompts_per_step=3",
                                   "generation.max_new_tokens=16", "generation.temperature=1.0",
                                   "resources.generator.max_batch_size=4"])
    prompts = PromptSet(examples=[None] * 3, prompt_ids=PROMPTS[:3])
    chunks = ChunkGenerator(chunk_config(cfg), _model(), TOK, prompts, replica=0, num_replicas=1)
    chunks.params = SamplingParams(max_new_tokens=16, temperature=1.0, stop_token_ids=STOPS)
    events = []
    stream = chunks.engine.stream

    def spying_stream(*args, on_finish, **kwargs):
        def finished(done):
            events.append(("sample", done.index))
            on_finish(done)
        return stream(*args, on_finish=finished, **kwargs)
    chunks.engine.stream = spying_stream
    parts = []
    whole = chunks.generate(chunk=0, policy_version=5,
                            on_group=lambda part: (events.append(("group", part.group)), parts.append(part)))
    groups = [e for e in events if e[0] == "group"]
    assert sorted(g for _, g in groups) == [0, 1, 2]
    for k, event in enumerate(events):
        if event[0] == "group":  # right after its group's last sample, before any other sample
            members = {event[1] * 3 + i for i in range(3)}
            assert events[k - 1][0] == "sample" and events[k - 1][1] in members
            assert {e[1] for e in events[:k] if e[0] == "sample"} >= members
    assert events.index(groups[0]) < len(events) - 1  # the first group left before the chunk ended
    assembly = ChunkAssembly(group_size=3)  # what the reward rank does with the parts it receives
    for part in parts:
        again = assembly.add(receive(assembly, part))
    for field in ("tokens", "completion_lens", "behavior_logprobs", "example_ids", "policy_versions"):
        assert torch.equal(getattr(again, field), getattr(whole, field)), field
    assert all(p.chunk_groups == 3 and p.policy_version == 5 for p in parts)


def _decode_steps(monkeypatch) -> list[int]:
    rows = []
    original = scheduler.decode

    def spy(model, proj, cache, tokens, positions, span):
        rows.append(tokens.shape[0])
        return original(model, proj, cache, tokens, positions, span)
    monkeypatch.setattr(scheduler, "decode", spy)
    original_step = scheduler.step

    def step_spy(model, proj, cache, decode_rows=None, prefill_rows=None):  # a decode step a prefill joined
        if decode_rows is not None:
            rows.append(decode_rows[0].shape[0])
        return original_step(model, proj, cache, decode_rows=decode_rows, prefill_rows=prefill_rows)
    monkeypatch.setattr(scheduler, "step", step_spy)
    return rows


def test_on_a_long_tail_continuous_batching_needs_fewer_and_fuller_decode_steps(monkeypatch):
    model = _model(2)
    # 1 in 16 tokens ends a row: geometric lengths (mean ~15) capped at 48, i.e. a long tail.
    params = SamplingParams(max_new_tokens=48, temperature=1.0, stop_token_ids=tuple(range(0, 256, 16)),
                            ignore_eos=True)
    prompts = [TOK.encode(f"prompt {i}", add_bos=True) for i in range(32)]
    results = {}
    for mode in ("static", "continuous"):
        rows = _decode_steps(monkeypatch)
        out = GenerationEngine(model, TOK, max_batch_size=8, batching=mode).generate(prompts, params, seed=0)
        tokens = sum(len(c.token_ids) for c in out)
        results[mode] = (len(rows), tokens / len(rows))  # decode steps, tokens per step
    (static_steps, static_fill), (cont_steps, cont_fill) = results["static"], results["continuous"]
    assert cont_steps < 0.75 * static_steps
    assert cont_fill > 1.3 * static_fill


def test_a_padded_static_batch_keeps_finished_rows_until_its_chunk_ends_with_the_same_answers(monkeypatch):
    model = _model(3)
    params = SamplingParams(max_new_tokens=12, temperature=0.0, stop_token_ids=STOPS)
    compacting = GenerationEngine(model, TOK, max_batch_size=4, batching="static")
    padded = GenerationEngine(model, TOK, max_batch_size=4, batching="static", compact_finished_rows=False)
    results = {}
    for name, engine in (("compacting", compacting), ("padded", padded)):
        rows = _decode_steps(monkeypatch)
        results[name] = (engine.generate(PROMPTS, params), list(rows))  # copied: the next spy wraps this one
    (want, compact_rows), (got, padded_rows) = results["compacting"], results["padded"]
    assert [c.token_ids for c in got] == [c.token_ids for c in want]
    assert min(compact_rows) < 4 and 4 in padded_rows and set(padded_rows) <= {4, 1}  # 9 = 4+4+1
    assert sum(padded_rows) > sum(compact_rows)


def test_weights_swapped_between_decode_steps_are_used_and_recorded_per_sequence():
    model, donor = _model(0), _model(3)
    params = SamplingParams(max_new_tokens=6, temperature=0.0, ignore_eos=True)
    engine = GenerationEngine(model, TOK, max_batch_size=1)
    calls = []

    def between_steps():
        calls.append(len(calls))
        if len(calls) == 3:  # before the 3rd decode step of the first sequence
            with torch.no_grad():
                for name, p in model.named_parameters():  # a sync writes the original names
                    p.copy_(donor.state_dict()[name])
            return 7
        return None
    first, second = engine.stream([[1, 2, 3], [4, 5]], params, between_steps=between_steps,
                                  policy_version=6)
    assert first.policy_versions == (6, 7) and second.policy_versions == (7, 7)
    [expected] = GenerationEngine(donor, TOK).generate([[4, 5]], params)
    assert second.token_ids.tolist() == expected.token_ids
    [old] = GenerationEngine(_model(0), TOK).generate([[1, 2, 3]], params)
    assert first.token_ids.tolist()[:3] == old.token_ids[:3]  # sampled before the swap
    assert first.token_ids.tolist() != old.token_ids


def test_a_sync_into_the_original_parameter_names_lands_in_the_engines_fused_weights():
    model, donor = _model(0), _model(4)
    names = {k: v.shape for k, v in model.state_dict().items()}
    params = SamplingParams(max_new_tokens=8, temperature=0.0, ignore_eos=True)
    engine = GenerationEngine(model, TOK)
    before = engine.generate([[1, 2, 3]], params)[0].token_ids
    fused = engine.proj["0.qkv"].weight  # [out, in]: wq | wk | wv stacked
    wk = model.layers[0].attention.wk.weight
    assert wk.untyped_storage().data_ptr() == fused.untyped_storage().data_ptr()  # a view, no copy
    with torch.no_grad():
        for name, p in dict(model.named_parameters()).items():  # what the weight sync does
            p.copy_(donor.state_dict()[name])
    assert torch.equal(fused[ARGS.n_heads * ARGS.head_dim:][:wk.shape[0]], donor.layers[0].attention.wk.weight)
    after = engine.generate([[1, 2, 3]], params)[0].token_ids
    assert after != before
    assert after == GenerationEngine(donor, TOK).generate([[1, 2, 3]], params)[0].token_ids
    assert {k: v.shape for k, v in model.state_dict().items()} == names
    assert all(torch.equal(v, donor.state_dict()[k]) for k, v in model.state_dict().items())
