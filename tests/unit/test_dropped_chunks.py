"""Stale rows, whatever the generator (G) and trainer (T) layouts: every stale group is dropped
and counted once (`trainer/stale_dropped_groups`), its chunk is asked again (it is not lost), and the
generator's credit counter `dropped/<replica>` moves only for chunks taken beyond a step's
(dynamic sampling's extra rounds), once per replica."""
from types import SimpleNamespace
import contextlib

import pytest
import torch

from llamarl_core.executors.feeds import FeedConfig, FeedRuntime, RewardFeed
from llamarl_core.executors.routing import chunk_slices_for_trainers
from llamarl_core.wire.rollout import Rollout


class FakeControl:
    def __init__(self):
        self.dropped: dict[int, int] = {}
        self.redo: list[tuple[int, int]] = []
        self.stale = 0

    def add_stale_groups(self, n):
        self.stale += n
        return self.stale

    def set_expected(self, replica: int, trainer_rank: int, chunk: int) -> None:
        pass

    def request_redo(self, replica, chunk):
        self.redo.append((replica, chunk))

    def add_dropped(self, replica: int, n: int = 1) -> int:
        self.dropped[replica] = self.dropped.get(replica, 0) + n
        return self.dropped[replica]


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
    """Every trainer rank collects step 2 (k = 1): each replica's first chunk (version 0) is
    stale and dropped, its second (version 2) is kept; `more`: then one extra round."""
    control = FakeControl()
    timeline = SimpleNamespace(span=lambda *a, **k: contextlib.nullcontext())
    for rank in range(trainers):
        rt = FeedRuntime(control, timeline, lambda: False, None, None, None, lambda i: 0, None)
        feed = RewardFeed(FeedConfig(4, 2, 1, generators), rt, rank, trainers)
        feed.inboxes = {}
        for i in feed.sources:
            (_, lo, hi), = [s for s in chunk_slices_for_trainers(i, generators, trainers, 4, 2) if s[0] == rank]
            feed.inboxes[i] = FakeInbox([rows(hi - lo, 0, i, 0), rows(hi - lo, 2, i, 1), rows(hi - lo, 2, i, 2)])
        batch, staleness, _ = feed.collect(step=2, version=2)
        assert batch.num_rows == 4 * 2 // trainers and torch.all(staleness == 0)
        assert batch.chunk == 1 and feed.next_chunk == {i: 0 for i in feed.sources}  # chunk 0 comes again
        if more:
            feed.collect_more(step=2, version=2)
    return control


@pytest.mark.parametrize("generators,trainers", [(1, 1), (1, 2), (2, 1), (2, 4), (4, 2)])
def test_each_stale_group_is_dropped_counted_once_and_its_chunk_asked_again(generators, trainers):
    control = collect_on_every_rank(generators, trainers)
    assert control.stale == 4  # chunk 0 of every replica: the step's 4 prompts
    assert set(control.redo) == {(i, 0) for i in range(generators)}
    assert control.dropped == {}  # not skipped: the credit rule still sees one chunk a step


@pytest.mark.parametrize("generators,trainers", [(1, 2), (2, 1), (4, 2)])
def test_an_extra_round_counts_each_replicas_chunk_exactly_once(generators, trainers):
    assert collect_on_every_rank(generators, trainers, more=True).dropped == {i: 1 for i in range(generators)}
