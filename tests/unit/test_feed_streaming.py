"""A streaming generator (the real ChunkStream, weights swapped in flight) feeding the trainer's
RewardFeed through in-process fakes (no processes, no store): chunks start only as
executors/admission.py admits them, the trainer takes them in order even when a straggler of
chunk n arrives after chunk n+1's groups, every token a step trains is within k versions of it,
nothing is dropped, and every prompt is trained exactly once."""
import contextlib
from types import SimpleNamespace

import pytest
import torch

from llamarl_core.executors.feeds import FeedConfig, FeedRuntime, RewardFeed
from llamarl_core.executors.admission import Admission
from llamarl_core.executors.setup import chunk_prompt_indices
from llamarl_core.executors.stream import ChunkStream

from tiny_models import prompts, tiny_chunks

PROMPTS = prompts(12)
STOPS = tuple(range(0, 256, 6))  # a long tail under the cap
K, STEPS = 1, 6                  # 6 chunks of 2 prompts: the 12 prompts once


class Control:
    def __init__(self):
        self.expected, self.duplicates = {}, 0

    def set_expected(self, replica, rank, chunk):
        self.expected[(replica, rank)] = chunk

    def add_duplicate_groups(self, n):
        self.duplicates += n

    def extra(self, replica):
        return 0


class Inbox:
    """The reward rank's groups in arrival order."""

    def __init__(self, arrivals):
        self.arrivals = list(arrivals)

    def get(self, should_stop):
        return self.arrivals.pop(0)


@pytest.mark.parametrize("pieces", [False, True], ids=["whole-share", "groups-as-taken"])
def test_a_streamed_run_trains_every_token_within_k_versions_and_every_prompt_once(pieces):
    """`pieces`: the feed hands each group on as it takes it (resources.trainer.stream_groups,
    executors/train_step.py); the pieces are the step's rows, in order."""
    # model seed 1: in its arrival order only the planted group is late (with seed 0's lengths
    # chunk 4's group 0, sampled under version 3, also ends after step 5 has opened: dropped too)
    cfg, chunks = tiny_chunks(PROMPTS, max_new_tokens=16, max_batch_size=4, seed=1, stop_token_ids=STOPS)
    stream = ChunkStream(chunks)
    token_versions = {}
    # the version held: one behind the newest chunk opened (chunk n opens under n - 1, as the
    # admission rule allows with k = 1); rows still running take it in flight, between decode steps
    held = lambda: max(0, stream.next_chunk - 1)  # noqa: E731
    control = Control()
    admission = Admission(control, 0, K)

    original = chunks.engine.stream

    def spying(prompts, *args, on_finish, **kwargs):  # every token's version, by row
        def finished(done):
            prompt = stream.rows[done.index][0].prompt_ids[stream.rows[done.index][1]] if not prompts \
                else prompts[done.index]
            key = (tuple(prompt), tuple(done.token_ids.tolist()), int(done.policy_versions[0]))
            token_versions.setdefault(key, []).append(done.token_versions.clone())
            on_finish(done)
        return original(prompts, *args, on_finish=finished, **kwargs)
    chunks.engine.stream = spying

    groups = []
    stream.run(0, may_start=lambda n: n < STEPS and admission.may_start(n, held()), held=held,
               on_group=groups.append, between_steps=held)
    assert len(groups) == 2 * STEPS
    late = groups.pop(0)          # the first group to end reaches the trainer after chunk 1's and
    groups.insert(4, late)        # chunk 2's first: its step waits for it, the later ones wait too
    assert (late.chunk, [g.chunk for g in groups[:4]]) == (0, [0, 1, 1, 2])

    rt = FeedRuntime(control, SimpleNamespace(span=lambda *a, **k: contextlib.nullcontext()), lambda: False,
                     None, None, None, lambda i: 0, None)
    feed = RewardFeed(FeedConfig(prompts_per_step=2, group_size=2, max_offpolicy_steps=K, replicas=1), rt, 0, 1)
    feed.inboxes[0] = Inbox(groups)

    trained = []
    for v in range(STEPS):  # step v trains with version v (the trainer's own pace)
        taken = []
        batch, staleness, _ = feed.collect(v, v, **({"on_groups": lambda g, s: taken.append((g, s))}
                                                     if pieces else {}))
        assert batch.num_rows == 4 and torch.all(staleness <= K)
        if pieces:  # handed on as taken (groups buffered early together), the step's rows in order
            assert sum(len(g) for g, _ in taken) == 2 and (v != 0 or len(taken) == 2)  # step 0: 1 + straggler
            assert torch.equal(torch.cat([r.example_ids for g, _ in taken for r in g]), batch.example_ids)
            assert torch.equal(torch.cat([s for _, s in taken]), staleness)
        for r in range(batch.num_rows):
            p, c = int(batch.prompt_lens[r]), int(batch.completion_lens[r])
            key = (tuple(batch.tokens[r, :p].tolist()), tuple(batch.tokens[r, p:p + c].tolist()),
                   int(batch.policy_versions[r]))
            for versions in token_versions[key]:
                assert int(versions.min()) >= v - K, (v, versions.tolist())  # per token
        # step v trains exactly chunk v's prompts: chunks in order, none overtakes a straggler
        assert sorted(batch.example_ids[::2].tolist()) == sorted(chunk_prompt_indices(len(PROMPTS), v, 2,
                                                                                       cfg.run.seed))
        trained += batch.example_ids[::2].tolist()

    assert any(int(v.max()) > int(v.min()) for vs in token_versions.values() for v in vs)  # in flight
    want = [i for n in range(STEPS) for i in chunk_prompt_indices(len(PROMPTS), n, 2, cfg.run.seed)]
    assert sorted(trained) == sorted(want) and len(set(trained)) == len(trained)  # each prompt once
    assert control.expected[(0, 0)] == STEPS and control.duplicates == 0  # every chunk consumed, no copy
