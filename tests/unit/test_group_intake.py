"""The trainer takes complete prompt groups, each replica's chunks in order (executors/intake.py,
issue #46 item 1): step v trains its slice of the replica's next chunk, later chunks' groups wait,
nothing is dropped for staleness, and a copy of a group taken or buffered is counted, never
trained twice."""
import torch

from llamarl_core.executors.intake import GroupIntake
from llamarl_core.wire.rollout import Rollout

G = 2  # samples per prompt


def group(chunk: int, slot: int, version: int, chunk_groups: int = 2, replica: int = 0) -> Rollout:
    """One prompt group as a generator sends it; example id = 10 * chunk + slot."""
    ids = torch.full((G,), 10 * chunk + slot)
    return Rollout(torch.zeros(G, 4, dtype=torch.long), torch.ones(G, dtype=torch.long),
                   torch.ones(G, dtype=torch.long), torch.zeros(G, 2), torch.zeros(G), ids, version,
                   replica, chunk, policy_versions=torch.tensor([version, version + 1]), group=slot,
                   chunk_groups=chunk_groups)


def ids(groups) -> list[int]:
    return [int(g.example_ids[0]) for g in groups]


def intake(**hooks) -> GroupIntake:
    return GroupIntake({0: 2}, G, **hooks)


def test_a_step_takes_its_chunk_in_order_and_a_later_chunks_early_groups_wait():
    consumed = []
    feed = intake(on_consumed=lambda i, n: consumed.append((i, n)))
    for chunk, slot in ((0, 1), (1, 0), (1, 1)):          # streamed: chunk 1 overtakes chunk 0's slot 0
        feed.add(group(chunk, slot, version=0))
    assert feed.take(0) is None                           # chunk 0 incomplete: chunk 1 may not go first
    assert feed.take_upto(0, 2) and feed.take(0) is None  # piece by piece: only chunk 0's slot 1
    feed.add(group(0, 0, version=0))
    assert ids(feed.take(0)) == [0]                       # the rest of chunk 0
    assert consumed == [(0, 1)] and feed.next_chunk == {0: 1}
    assert ids(feed.take(0)) == [10, 11] and consumed == [(0, 1), (0, 2)]
    assert feed.take(0) is None and feed.trained[0] == {}  # nothing buffered: the feed waits


def test_piece_by_piece_a_chunk_goes_in_its_groups_arrival_order():
    feed = intake()
    for chunk, slot in ((1, 0), (0, 1), (0, 0)):
        feed.add(group(chunk, slot, version=0))
    assert ids(feed.take_upto(0, 1)) == [1] and ids(feed.take_upto(0, 5)) == [0]
    assert ids(feed.take_upto(0, 5)) == [10] and feed.next_chunk == {0: 1}


def test_a_whole_chunk_slice_is_split_into_its_groups():
    feed = intake()
    whole = Rollout(torch.zeros(4, 4, dtype=torch.long), torch.ones(4, dtype=torch.long),
                    torch.ones(4, dtype=torch.long), torch.zeros(4, 2), torch.zeros(4),
                    torch.tensor([7, 7, 8, 8]), 0, 0, 0)  # what the reward role sends today
    assert feed.add(whole) == 2
    assert ids(feed.take(0)) == [7, 8] and feed.next_chunk == {0: 1}


def test_an_old_group_is_trained_never_dropped():
    """Versions are not the intake's business (executors/admission.py bounds them at the start):
    a group of version 0 is taken at any step."""
    feed = intake()
    for slot in (0, 1):
        feed.add(group(0, slot, version=0))
    assert ids(feed.take(0)) == [0, 1] and not hasattr(feed, "dropped_groups")


def test_a_restarted_generators_copies_are_counted_and_never_trained_twice():
    """A restarted generator starts again at the first chunk not consumed: its copies of groups
    taken already are dropped and counted; a copy of one only buffered replaces it, in its place."""
    duplicates = []
    feed = intake(on_duplicate=lambda i, c, n: duplicates.append((i, c, n)))
    feed.add(group(0, 0, version=0))
    assert ids(feed.take_upto(0, 2)) == [0]               # streamed: slot 0 taken, chunk 0 not consumed
    feed.add(group(1, 1, version=0))                      # buffered ahead
    for chunk, slot in ((0, 0), (0, 1), (1, 0), (1, 1)):  # the restarted generator, from chunk 0
        feed.add(group(chunk, slot, version=1))
    assert duplicates == [(0, 0, 1), (0, 1, 1)] and feed.duplicate_groups == 2
    taken = feed.take(0)
    assert ids(taken) == [1] and taken[0].policy_version == 1  # the rest of chunk 0: its slot 1
    taken = feed.take(0)
    assert ids(taken) == [11, 10] and [g.policy_version for g in taken] == [1, 1]  # slot 1 kept its place
    feed.add(group(0, 1, version=2))                      # below next_chunk: dropped, counted
    assert feed.duplicate_groups == 3 and feed.take(0) is None and feed.buffer[0] == {}


def test_a_resumed_feed_skips_the_groups_trained_ahead_and_takes_the_ones_only_buffered():
    feed = intake()
    for chunk, slot in ((0, 0), (1, 0), (0, 1)):
        feed.add(group(chunk, slot, version=0))
    feed.take_upto(0, 1)                                  # chunk 0 slot 0
    position = feed.position()
    assert position == {"next_chunk": {0: 0}, "trained_ahead": {0: {0: [0]}}}
    resumed = intake()
    resumed.restore(__import__("json").loads(__import__("json").dumps(position)))  # through JSON
    assert resumed.buffer[0] == {}                         # buffered only: generated again
    for chunk in (0, 1):                                  # the generator starts at chunk 0 again
        for slot in (0, 1):
            resumed.add(group(chunk, slot, version=1))
    assert ids(resumed.take(0)) == [1] and ids(resumed.take(0)) == [10, 11]
    assert resumed.next_chunk == {0: 2}


def test_a_checkpoint_resumes_each_replica_at_the_first_chunk_any_rank_has_not_consumed():
    from types import SimpleNamespace

    from llamarl_core.executors.feeds import merge_positions
    control = SimpleNamespace(extra=lambda i: {0: 1, 1: 0}[i], duplicate_groups=lambda: 5)
    views = [{"next_chunk": {0: 3, 1: 5}, "trained_ahead": {0: {3: [0]}}},   # rank 0
             {"next_chunk": {0: 2, 1: 5}, "trained_ahead": {}}]              # rank 1 lags on replica 0
    state = merge_positions(views, control)
    # the max (as before) would skip rank 1's untrained groups of chunk 2: lost on resume
    assert state == {"next_chunk": {0: 2, 1: 5}, "extra": {0: 1, 1: 0}, "positions": views,
                     "duplicate_dropped_groups": 5}


def test_each_trainer_rank_resumes_at_its_own_position():
    import json
    from types import SimpleNamespace

    from llamarl_core.executors.feeds import FeedConfig, FeedRuntime, RewardFeed, merge_positions
    rt = FeedRuntime(SimpleNamespace(set_expected=lambda *a: None), None, lambda: False, None, None, None,
                     lambda i: 0, None)
    feeds = [RewardFeed(FeedConfig(4, 2, 1, 1), rt, rank, 2) for rank in range(2)]  # 2 groups each a chunk
    for rank, feed in enumerate(feeds):
        for slot in (0, 1):
            feed.intake.add(group(0, slot, version=0))
        feed.intake.take(0)
        if rank == 0:  # rank 0 is a chunk ahead
            for slot in (0, 1):
                feed.intake.add(group(1, slot, version=0))
            feed.intake.take(0)
    control = SimpleNamespace(extra=lambda i: 0, duplicate_groups=lambda: 0)
    state = json.loads(json.dumps(merge_positions([f.position() for f in feeds], control)))
    assert state["next_chunk"] == {"0": 1}  # the replica restarts where rank 1 is
    resumed = [RewardFeed(FeedConfig(4, 2, 1, 1), rt, rank, 2) for rank in range(2)]
    for feed in resumed:
        feed.restore(state)
    assert [f.next_chunk for f in resumed] == [{0: 2}, {0: 1}]  # rank 0 does not train chunk 1 again
