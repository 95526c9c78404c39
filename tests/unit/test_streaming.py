"""Streaming rollouts (executors/stream.py, every async generator): a generator replica's
slots stay full across a step boundary, every token records its version, and each chunk's
tokens stay within k versions of the step that trains it."""
import pytest
import torch

from llamarl_core.config.load import load_config
from llamarl_core.executors.chunks import ChunkGenerator
from llamarl_core.executors.generate_loop import SWAP_POLL_STEPS, GenerateLoop
from llamarl_core.executors.pipeline import chunk_config
from llamarl_core.executors.setup import PromptSet, chunk_prompt_indices
from llamarl_core.executors.stream import ChunkStream, StreamCut
from llamarl_core.generation import GenerationEngine, SamplingParams
from llamarl_core.generation import scheduler
from llamarl_core.models import ByteTokenizer, Llama, ModelArgs

from fake_ports import FakeControl, LocalWeights

ARGS = ModelArgs(vocab_size=260, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96,
                 max_seq_len=96, rope_theta=10000.0)
TOK = ByteTokenizer()
PROMPTS = [TOK.encode(f"prompt number {i}", add_bos=True) for i in range(12)]
STOPS = tuple(range(0, 256, 8))  # 1 in 8 tokens ends a row: a long tail under the cap
SLOTS = 4
DECODE = scheduler.Batch._decode  # unwrapped, so a second spy does not call the first


def _model(seed=0):
    torch.manual_seed(seed)
    return Llama(ARGS).eval().requires_grad_(False)


def _chunks(prompts_per_step=2, group_size=2):
    cfg = load_config("cpu_tiny", [f"algorithm.group_size={group_size}",
                                   f"algorithm.prompts_per_step={prompts_per_step}",
                                   "generation.max_new_tokens=24", f"resources.generator.max_batch_size={SLOTS}"])
    prompts = PromptSet(examples=[None] * len(PROMPTS), prompt_ids=PROMPTS)
    chunks = ChunkGenerator(chunk_config(cfg), _model(), TOK, prompts, replica=0, num_replicas=1)
    chunks.params = SamplingParams(max_new_tokens=24, temperature=1.0, stop_token_ids=STOPS)
    return cfg, chunks


def _spy_decode(monkeypatch, stream=None):
    """Per decode step: (rows occupied, the chunks they belong to)."""
    steps = []
    original = DECODE

    def spy(batch):
        live = [j for j in batch.sample[:batch.used] if j >= 0]
        chunks = {stream.rows[j][0].chunk for j in live} if stream is not None else set()
        steps.append((len(live), chunks))
        return original(batch)
    monkeypatch.setattr(scheduler.Batch, "_decode", spy)
    return steps


def test_refilled_prompts_give_the_same_greedy_answers_as_one_fixed_list():
    model = _model(1)
    params = SamplingParams(max_new_tokens=16, temperature=0.0, stop_token_ids=STOPS)
    want = GenerationEngine(model, TOK, max_batch_size=3).generate(PROMPTS, params)
    queue, got = list(range(len(PROMPTS))), {}

    def refill(free):
        take, queue[:] = queue[:min(free, 2)], queue[min(free, 2):]  # at most 2 per turn
        return [PROMPTS[j] for j in take]
    out = GenerationEngine(model, TOK, max_batch_size=3).stream(
        [], params, on_finish=lambda d: got.__setitem__(d.index, d), refill=refill)
    assert out == [] and sorted(got) == list(range(len(PROMPTS)))
    assert [got[j].token_ids.tolist() for j in range(len(PROMPTS))] == [c.token_ids for c in want]
    assert all(torch.equal(got[j].token_versions, torch.zeros_like(got[j].token_ids)) for j in got)


def test_a_streaming_generator_keeps_its_slots_full_across_a_step_boundary(monkeypatch):
    cfg, chunks = _chunks()
    stream = ChunkStream(chunks)
    steps = _spy_decode(monkeypatch, stream)
    groups = []
    nxt = stream.run(0, may_start=lambda n: n < 3, held=lambda: 0, on_group=groups.append)
    assert nxt == 3
    # every group of chunks 0, 1, 2 came out once, with its chunk's prompts
    for n in range(3):
        ids = sorted(int(g.example_ids[0]) for g in groups if g.chunk == n)
        assert ids == sorted(chunk_prompt_indices(len(PROMPTS), n, 2, cfg.run.seed))
    assert len(groups) == 6 and all(g.num_rows == 2 for g in groups)
    # until the last chunk's rows have all started, every decode step runs every slot: the
    # slots chunk 0's tail frees are taken by chunk 1's prompts (the old chunk loop left them idle)
    last_opened = next(i for i, (_, c) in enumerate(steps) if 2 in c)
    assert all(live == SLOTS for live, _ in steps[:last_opened])
    assert any(c == {0, 1} for _, c in steps)  # one decode step ran rows of two steps

    # the chunk-by-chunk loop on the same prompts: its tails run with free slots
    _, chunked = _chunks()
    steps_chunked = _spy_decode(monkeypatch)
    for n in range(3):
        chunked.generate(n, 0)
    assert any(live < SLOTS for live, _ in steps_chunked[:len(steps_chunked) // 2])
    assert len(steps) < len(steps_chunked)


def test_a_group_streamed_into_slots_one_by_one_is_prefilled_once():
    # 4 slots, groups of 4: after the first fill a slot frees one at a time, so a group's members
    # start at different decode steps; each must start from its first member's prompt KV
    cfg, chunks = _chunks(prompts_per_step=2, group_size=4)
    stream = ChunkStream(chunks)
    groups = []
    stream.run(0, may_start=lambda n: n < 3, held=lambda: 0, on_group=groups.append)
    assert len(groups) == 6
    prompts = [PROMPTS[int(g.example_ids[0])] for g in groups]
    assert len({tuple(p) for p in prompts}) == 6  # no prompt in two groups: one prefill each
    stats = chunks.engine.last_stats
    assert stats["prompt_tokens"] == 4 * sum(len(p) for p in prompts)
    assert stats["prefill_tokens"] == sum(len(p) for p in prompts)  # was one prefill per member


def test_every_token_of_a_chunk_is_within_k_versions_of_the_step_that_trains_it(monkeypatch):
    k = 1
    cfg, chunks = _chunks()
    stream = ChunkStream(chunks)
    held, turns, tokens_of = [0], [0], {}

    def between_steps():  # the trainer publishes a version every 5 decode turns (swapped in flight)
        turns[0] += 1
        if turns[0] % 5 == 0:
            held[0] += 1
        return held[0]
    original = chunks.engine.stream

    def spying_stream(*args, on_finish, **kwargs):
        def finished(done):
            groups, row = stream.rows[done.index]
            tokens_of.setdefault(groups.chunk, []).append(done)
            on_finish(done)
        return original(*args, on_finish=finished, **kwargs)
    chunks.engine.stream = spying_stream
    groups = []
    # chunk n is trained at step n (with version n) and may start once held >= n - k
    stream.run(0, may_start=lambda n: n < 5 and n <= held[0] + k, held=lambda: held[0],
               on_group=groups.append, between_steps=between_steps)
    assert sorted(tokens_of) == [0, 1, 2, 3, 4]
    spans_versions = False
    for n, rows in tokens_of.items():
        for done in rows:
            v = done.token_versions
            assert v.numel() == done.token_ids.numel()
            assert int(v.min()) >= n - k, (n, v.tolist())       # per token: within k of step n
            assert int(v[0]) == done.policy_versions[0] and int(v[-1]) <= done.policy_versions[1]
            assert torch.all(v[1:] >= v[:-1])                    # versions only move forward
            spans_versions |= int(v.max()) > int(v.min())
    assert spans_versions  # some row ran under two versions (an in-flight swap)
    for g in groups:  # what the trainer checks: the oldest token of the group
        assert g.policy_version >= g.chunk - k and int(g.policy_versions.min()) == g.policy_version


def test_a_stream_cut_ends_the_engine_run_at_once():
    _, chunks = _chunks()
    stream = ChunkStream(chunks)
    calls = []

    def may_start(n):
        calls.append(n)
        if n == 1:
            raise StreamCut()
        return True
    with pytest.raises(StreamCut):
        stream.run(0, may_start, held=lambda: 0)
    assert calls == [0, 1]


def test_a_closed_gate_opens_at_the_turn_the_new_version_arrives():
    """k reached: chunk 1 may start only under version 1. The gate is asked again only every
    few turns (store round trips), but a swapped-in version is what opens it, so chunk 1 must
    start at the turn its version arrives: waiting out the retry count left slots idle, or
    ended the stream with chunk 1 unstarted (it used to)."""
    _, chunks = _chunks()
    stream = ChunkStream(chunks)
    held, turn, asks, bumped = [0], [0], [], []

    def between_steps():
        turn[0] += 1
        if not bumped and any(not ok for _, _, ok in asks) and turn[0] > asks[-1][0]:
            held[0], bumped[:] = 1, [turn[0]]  # the turn after the gate first closed
        return held[0]

    def may_start(n):
        ok = n < 2 and n <= held[0]  # k = 0
        asks.append((turn[0], n, ok))
        return ok
    nxt = stream.run(0, may_start, held=lambda: held[0], between_steps=between_steps)
    assert bumped, "the gate never closed: chunk 0's rows did not outlast its first free slot"
    assert nxt == 2
    first_ask_after = next(a for a in asks if a[0] >= bumped[0])
    assert first_ask_after == (bumped[0], 1, True), asks


def test_weights_that_land_while_the_gate_holds_slots_back_are_adopted_at_the_next_decode_step():
    """k = 1 under version 0: chunks 0 and 1 may start, chunk 2 waits for version 1. Looks for
    weights come every SWAP_POLL_STEPS decode steps, but while the gate holds freed slots back
    a look comes at every step: version 1, landing then, is taken at the next step and chunk 2
    starts in it (with every look 8 steps apart it waited up to 7 steps with slots idle)."""
    _, chunks = _chunks()
    stream = ChunkStream(chunks)
    model = chunks.engine.model
    weights = LocalWeights(model, model)
    loop = GenerateLoop(chunks, weights, FakeControl(), replica=0, global_rank=0, max_offpolicy_steps=1,
                        should_stop=lambda: False)
    weights.publish(0)
    loop.receive()
    turn, landed, adopted, opened = [0], [], [], {}

    def between_steps():
        turn[0] += 1
        # land version 1 at a gated turn that is not a multiple of SWAP_POLL_STEPS (where the
        # old every-8-steps look would have come anyway)
        if not landed and stream.gated and loop.decode_turns % SWAP_POLL_STEPS != 0:
            weights.publish(1)
            landed.append(turn[0])
        version = loop.swap_if_published(eager=stream.gated)
        if version == 1 and not adopted:
            adopted.append(turn[0])
        return version

    def may_start(n):
        ok = n < 3 and n <= loop.held + 1
        if ok and n not in opened:
            opened[n] = turn[0]
        return ok
    nxt = stream.run(0, may_start, held=lambda: loop.held, between_steps=between_steps)
    assert landed, "the gate never held slots back: chunk 1's rows did not outlast a free slot"
    assert nxt == 3 and adopted == landed          # adopted in the very turn it landed
    assert opened[2] == landed[0]                   # and chunk 2 started in that turn
    # away from the gate, looks stay every SWAP_POLL_STEPS steps
    looks_ungated = loop.decode_turns // SWAP_POLL_STEPS
    assert weights.looks < loop.decode_turns and weights.looks >= looks_ungated
