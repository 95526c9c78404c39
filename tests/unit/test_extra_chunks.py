"""Whatever the generator (G) and trainer (T) layouts, a step takes each replica's next chunk
(no version is too old: executors/admission.py), and the admission counter `extra/<replica>`
moves only for chunks taken beyond a step's (dynamic sampling's extra rounds), once per replica,
before that chunk is taken."""
from types import SimpleNamespace
import contextlib

import pytest
import torch

from llamarl_core.executors.feeds import FeedConfig, FeedRuntime, RewardFeed
from llamarl_core.executors.routing import chunk_slices_for_trainers
from llamarl_core.wire.rollout import Rollout


class FakeControl:
    def __init__(self):
        self.extras: dict[int, int] = {}

    def set_expected(self, replica: int, trainer_rank: int, chunk: int) -> None:
        pass

    def add_extra(self, replica: int, n: int = 1) -> int:
        self.extras[replica] = self.extras.get(replica, 0) + n
        return self.extras[replica]


class FakeInbox:
    """Hands out the given rollouts in order, like an AsyncReceiver."""

    def __init__(self, rollouts):
        self.rollouts = list(rollouts)

    def get(self, should_stop):
        return self.rollouts.pop(0)


def rows(n: int, version: int, replica: int, chunk: int) -> Rollout:
    return Rollout(torch.zeros(n, 4, dtype=torch.long), torch.ones(n, dtype=torch.long),
                   torch.ones(n, dtype=torch.long), torch.zeros(n, 2), torch.zeros(n),
                   torch.zeros(n, dtype=torch.long), version, replica, chunk)


def collect_on_every_rank(generators: int, trainers: int, more: bool = False) -> FakeControl:
    """Every trainer rank collects step 2 (k = 1): each replica's chunk 0, sampled under version 0,
    is trained (two versions behind: the admission rule, not the trainer, bounds that);
    `more`: then one extra round takes chunk 1."""
    control = FakeControl()
    timeline = SimpleNamespace(span=lambda *a, **k: contextlib.nullcontext())
    for rank in range(trainers):
        rt = FeedRuntime(control, timeline, lambda: False, None, None, None, lambda i: 0, None)
        feed = RewardFeed(FeedConfig(4, 2, 1, generators), rt, rank, trainers)
        feed.inboxes = {}
        for i in feed.sources:
            (_, lo, hi), = [s for s in chunk_slices_for_trainers(i, generators, trainers, 4, 2) if s[0] == rank]
            feed.inboxes[i] = FakeInbox([rows(hi - lo, 2, i, 1), rows(hi - lo, 0, i, 0), rows(hi - lo, 2, i, 2)])
        batch, staleness, _ = feed.collect(step=2, version=2)
        assert batch.num_rows == 4 * 2 // trainers and torch.all(staleness == 2)
        assert batch.chunk == 0 and feed.next_chunk == {i: 1 for i in feed.sources}  # chunk 1 waits
        if more:
            batch, _, _ = feed.collect_more(step=2, version=2)
            assert batch.chunk == 1 and feed.next_chunk == {i: 2 for i in feed.sources}
    return control


@pytest.mark.parametrize("generators,trainers", [(1, 1), (1, 2), (2, 1), (2, 4), (4, 2)])
def test_a_step_takes_each_replicas_next_chunk_whatever_arrived_first(generators, trainers):
    assert collect_on_every_rank(generators, trainers).extras == {}  # one chunk a step: nothing extra


@pytest.mark.parametrize("generators,trainers", [(1, 2), (2, 1), (4, 2)])
def test_an_extra_round_counts_each_replicas_chunk_exactly_once(generators, trainers):
    assert collect_on_every_rank(generators, trainers, more=True).extras == {i: 1 for i in range(generators)}
