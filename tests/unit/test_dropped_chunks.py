"""Each stale chunk is counted once in `dropped/<replica>`, whatever the generator (G) and
trainer (T) layouts: the generator's credit rule reads that count."""
from types import SimpleNamespace

import pytest
import torch

from llamarl_core.config.schema import LlamaRLConfig
from llamarl_core.executors.feeds import RewardFeed
from llamarl_core.executors.routing import chunk_slices_for_trainers
from llamarl_core.wire.rollout import Rollout


class FakeControl:
    def __init__(self):
        self.dropped: dict[int, int] = {}

    def set_expected(self, replica: int, trainer_rank: int, chunk: int) -> None:
        pass

    def add_dropped(self, replica: int, n: int = 1) -> int:
        self.dropped[replica] = self.dropped.get(replica, 0) + n
        return self.dropped[replica]


class FakeTimeline:
    def span(self, *a, **k):
        import contextlib
        return contextlib.nullcontext()


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


def collect_on_every_rank(generators: int, trainers: int) -> FakeControl:
    """Every trainer rank collects step 2 (k = 1): each replica's first chunk (version 0) is
    stale and dropped, its second (version 2) is kept."""
    cfg = LlamaRLConfig()
    cfg.algorithm.prompts_per_step, cfg.algorithm.group_size, cfg.algorithm.max_offpolicy_steps = 4, 2, 1
    control = FakeControl()
    for rank in range(trainers):
        ctx = SimpleNamespace(cfg=cfg, control=control, timeline=FakeTimeline(), should_stop=lambda: False,
                              ranks=lambda role: list(range(generators)) if role == "generator" else [],
                              generator_replicas=generators)
        feed = RewardFeed(ctx, rank, trainers)
        feed.inboxes = {}
        for i in feed.sources:
            (_, lo, hi), = [s for s in chunk_slices_for_trainers(i, generators, trainers, 4, 2) if s[0] == rank]
            feed.inboxes[i] = FakeInbox([rows(hi - lo, 0, i, 0), rows(hi - lo, 2, i, 1)])
        batch, staleness, _ = feed.collect(step=2, version=2)
        assert batch.num_rows == 4 * 2 // trainers and torch.all(staleness == 0)
    return control


@pytest.mark.parametrize("generators,trainers", [(1, 1), (1, 2), (2, 1), (2, 4), (4, 2)])
def test_each_replicas_dropped_chunk_is_counted_exactly_once(generators, trainers):
    assert collect_on_every_rank(generators, trainers).dropped == {i: 1 for i in range(generators)}
