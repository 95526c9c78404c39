"""The one admission rule (executors/admission.py): `may_start(n, held)` is n − extra ≤ held + k
with weights held, and it is the only place staleness is decided: every path that starts
generation (the chunk loop, the stream's per-chunk gate, the sync actor) asks it and obeys it."""
import contextlib
from types import SimpleNamespace

import pytest

from llamarl_core.executors.admission import Admission
from llamarl_core.executors.feeds import FeedConfig, FeedRuntime, OwnChunks
from llamarl_core.executors.generate_loop import GenerateLoop
from llamarl_core.executors.generator import GeneratorExecutor
from llamarl_core.executors.pipeline import chunk_config
from llamarl_core.executors.setup import PromptSet
from llamarl_core.executors.stream import ChunkStream

from fake_ports import FakeControl
from tiny_models import TOK, prompts, tiny_chunks

PROMPTS = prompts(8)


def test_a_chunk_may_start_while_it_is_trained_within_k_versions_of_the_held_one():
    control = FakeControl()
    one = Admission(control, replica=0, max_offpolicy_steps=1)
    assert not one.may_start(0, held=-1)                       # nothing held yet
    # k = 1, held v0, no extra: chunk n trains at step n, so chunks 0 and 1 (steps 0, 1 ≤ 0 + 1)
    assert [one.may_start(n, 0) for n in range(4)] == [True, True, False, False]
    assert [one.may_start(n, 2) for n in range(5)] == [True, True, True, True, False]
    control.add_extra(0)                                       # a step took one extra chunk of it
    # chunk n now trains at step n − 1: chunks up to 0 + 1 + 1 = 2
    assert [one.may_start(n, 0) for n in range(4)] == [True, True, True, False]
    assert Admission(control, replica=1, max_offpolicy_steps=1).may_start(2, 0) is False  # per replica
    # k = 0, one slot: at version 3 with 2 extra chunks, chunk 5 = 3 + 2 and nothing beyond
    control.add_extra(2, 2)
    sync = Admission(control, replica=2, max_offpolicy_steps=0)
    assert sync.may_start(5, 3) and not sync.may_start(6, 3)
    # k = 2: three slots at held v1
    assert [Admission(FakeControl(), 0, 2).may_start(n, 1) for n in range(5)] == [True] * 4 + [False]


@pytest.fixture
def asks(monkeypatch):
    """`Admission.may_start` replaced by a stricter rule (only chunks < 2) that records each ask."""
    calls = []

    def stricter(self, chunk, held):
        calls.append((chunk, held))
        return chunk < 2
    monkeypatch.setattr(Admission, "may_start", stricter)
    return calls


def _chunks():
    return tiny_chunks(PROMPTS, max_new_tokens=8, max_batch_size=2, seed=0)


def test_the_generator_loop_asks_the_rule_and_obeys_it(asks):
    """GenerateLoop.may_generate: the generator's (and a TP leader's) test before it streams."""
    loop = GenerateLoop(None, SimpleNamespace(ready=lambda: False), FakeControl(), replica=0, global_rank=0,
                        max_offpolicy_steps=5, should_stop=lambda: False)
    loop.held = 7  # k = 5 and v7 would admit chunk 9: the patched rule says no
    assert loop.may_generate(1) and not loop.may_generate(2)
    assert asks == [(1, 7), (2, 7)]


def test_the_streams_gate_asks_the_rule_for_each_chunk_and_starts_only_what_it_admits(asks):
    """GeneratorExecutor._stream, the gate a streaming replica (and a TP leader, whose followers
    replay its decisions) asks before each chunk's first row, with every other part a fake."""
    _, chunks = _chunks()
    loop = GenerateLoop(chunks, SimpleNamespace(ready=lambda: False), FakeControl(), replica=0,
                        global_rank=0, max_offpolicy_steps=5, should_stop=lambda: False)
    loop.held = 4  # k = 5 would admit chunks up to 9
    gen = GeneratorExecutor.__new__(GeneratorExecutor)
    sent = []
    gen.ctx = SimpleNamespace(should_stop=lambda: False, timeline=SimpleNamespace(
        span=lambda *a, **k: contextlib.nullcontext(), split=lambda **k: None))
    gen.watch = SimpleNamespace(poll=lambda: False)
    gen.rank = SimpleNamespace(agree=lambda flag: flag)
    gen.steps = SimpleNamespace(announce=lambda *a, **k: None)
    gen.loop, gen.chunks, gen.stream = loop, chunks, ChunkStream(chunks)
    gen._chunk_done = lambda n, t0=None: None
    sender = SimpleNamespace(idle=lambda: True, send=lambda part, link, tag: sent.append(part.chunk))
    assert gen._stream(sender, None, 0, 0.0) == 2              # chunks 0 and 1 started, 2 refused
    assert asks[:3] == [(0, 4), (1, 4), (2, 4)] and {c for c, _ in asks} == {0, 1, 2}
    assert sorted(sent) == [0, 0, 1, 1]                        # every group of chunks 0 and 1, nothing of 2


def test_the_sync_actor_asks_the_rule_before_it_generates_and_refuses_what_it_does_not_admit(asks):
    cfg, chunks = _chunks()
    rt = FeedRuntime(FakeControl(), SimpleNamespace(span=lambda *a, **k: contextlib.nullcontext()),
                     lambda: False, None, None, None, lambda i: 0, None)
    actor = OwnChunks(FeedConfig(2, 2, 0, 1), rt, chunk_config(cfg), 0, 1, chunks.engine.model, TOK,
                      PromptSet(examples=[None] * len(PROMPTS), prompt_ids=PROMPTS))
    generated = []

    class Generated(Exception):
        pass

    def generate(chunk, version):
        generated.append(chunk)
        raise Generated()  # what follows (send, score) is not this test's business
    actor.chunks.generate = generate
    with pytest.raises(Generated):
        actor.collect(step=1, version=1)                       # chunk 1 = step 1: admitted
    with pytest.raises(RuntimeError, match="chunk 2 may not start at version 2"):
        actor.collect(step=2, version=2)                       # the patched rule says no
    assert asks == [(1, 1), (2, 2)] and generated == [1]
