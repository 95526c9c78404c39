"""The trainer takes complete prompt groups (executors/intake.py, issue 26 item 2): step v trains
the first groups whose oldest token is within k versions of v, in arrival order; a group too
stale is dropped, counted and its chunk generated again, and every prompt is trained once."""
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


def intake(k=1, **hooks) -> GroupIntake:
    return GroupIntake({0: 2}, G, k, **hooks)


def test_a_step_takes_the_first_fresh_groups_in_arrival_order_and_keeps_the_rest_for_the_next():
    consumed = []
    feed = intake(on_consumed=lambda i, n: consumed.append((i, n)))
    for chunk, slot in ((0, 1), (1, 0), (0, 0), (1, 1)):  # streamed: chunk 1 starts before 0 ends
        feed.add(group(chunk, slot, version=0))
    assert ids(feed.take(0, version=0)) == [1, 10]        # arrival order, not chunk order
    assert consumed == [] and feed.next_chunk == {0: 0}  # chunk 0's slot 0 is not trained yet
    assert ids(feed.take(0, version=1)) == [0, 11]
    assert consumed == [(0, 2)] and feed.next_chunk == {0: 2} and feed.trained[0] == {}
    assert feed.take(0, version=2) is None                # nothing buffered: the feed waits


def test_a_whole_chunk_slice_is_split_into_its_groups():
    feed = intake()
    whole = Rollout(torch.zeros(4, 4, dtype=torch.long), torch.ones(4, dtype=torch.long),
                    torch.ones(4, dtype=torch.long), torch.zeros(4, 2), torch.zeros(4),
                    torch.tensor([7, 7, 8, 8]), 0, 0, 0)  # what the reward role sends today
    assert feed.add(whole) == 2
    assert ids(feed.take(0, version=0)) == [7, 8] and feed.next_chunk == {0: 1}


def test_a_too_stale_group_is_dropped_counted_generated_again_and_trained_once():
    redo, consumed = [], []
    feed = intake(k=1, on_drop=lambda i, c, n: redo.append((i, c, n)), on_consumed=lambda i, n: consumed.append(n))
    feed.add(group(0, 0, version=0))
    feed.add(group(0, 1, version=0))
    assert ids(feed.take(0, version=0)) == [0, 1]
    feed.add(group(1, 0, version=0))                      # started under v0: fine for step 1 ...
    feed.add(group(1, 1, version=1))
    feed.add(group(2, 0, version=1))
    assert ids(feed.take(0, version=1)) == [10, 11]
    feed.add(group(2, 1, version=0))                      # ... a straggler of v0 reaches step 2
    assert feed.take(0, version=2) is None                # k = 1: v0 < 2 - 1, dropped
    assert feed.dropped_groups == 1 and redo == [(0, 2, 1)]
    assert feed.next_chunk == {0: 2}                      # chunk 2 is not consumed: it comes again
    again = [group(2, 0, version=2), group(2, 1, version=2)]  # the chunk asked again, fresh
    for g in again:
        feed.add(g)
    taken = feed.take(0, version=2)
    assert ids(taken) == [20, 21] and [g.policy_version for g in taken] == [2, 2]  # the fresh copy took
    # the buffered one's place (arrival order kept)
    assert consumed == [1, 2, 3]
    feed.add(group(2, 1, version=2))                      # a third copy (a second redo) is skipped
    assert feed.take(0, version=3) is None and len(feed.buffer[0]) == 0
    assert feed.duplicate_groups == 2                     # the straggler's place taken, the third copy


def test_a_late_copy_of_a_group_is_dropped_and_counted_never_trained_twice():
    """Two asks for chunk 0 answered by two copies (attempts 1, 2), the second arriving after
    the first was trained: its groups are dropped and counted; one still only buffered is
    replaced by the later copy, in its place."""
    duplicates, trained = [], []
    feed = intake(k=1, on_duplicate=lambda i, c, n: duplicates.append((i, c, n)))
    feed.add(group(0, 0, version=0))
    assert feed.take(0, version=2) is None                # stale: dropped (asked again)
    feed.add(group(0, 0, version=2))                      # copy 1 of slot 0
    feed.add(group(0, 1, version=0))                      # the original's slot 1: fresh enough at v1
    trained += feed.take(0, version=1)
    assert ids(trained) == [0, 1] and feed.next_chunk == {0: 1}
    for slot in (0, 1):                                   # copy 2 of chunk 0: both slots trained
        feed.add(group(0, slot, version=2))
    assert duplicates == [(0, 0, 1), (0, 0, 1)] and feed.duplicate_groups == 2
    assert feed.take(0, version=2) is None                # nothing of chunk 0 is trained again
    feed.add(group(1, 0, version=1))
    feed.add(group(1, 1, version=1))
    feed.add(group(1, 0, version=2))                      # a later copy while the first is buffered
    taken = feed.take(0, version=2)
    assert ids(taken) == [10, 11] and taken[0].policy_version == 2  # the later copy, in the first's place
    assert duplicates[-1] == (0, 1, 1) and feed.duplicate_groups == 3


def test_every_group_a_step_takes_is_within_k_versions_of_it():
    k, feed, trained = 2, intake(k=2), []
    arrivals = [group(c, s, version=max(0, c - k + s)) for c in range(6) for s in (1, 0)]
    arrivals[3] = group(1, 0, version=0)                  # late and old
    for v in range(6):
        for g in arrivals[2 * v: 2 * v + 2]:
            feed.add(g)
        taken = feed.take(0, version=v)
        if taken is None:
            continue
        for g in taken:
            trained.append(int(g.example_ids[0]))
            assert int(g.policy_versions.min()) >= v - k   # each row's first (oldest) token
    assert len(trained) == len(set(trained))


def test_a_resumed_feed_skips_the_groups_trained_ahead_and_takes_the_ones_only_buffered():
    feed = intake()
    for chunk, slot in ((0, 0), (1, 0), (0, 1), (1, 1)):
        feed.add(group(chunk, slot, version=0))
    feed.take(0, version=0)                               # chunk 0 slot 0, chunk 1 slot 0
    position = feed.position()
    assert position == {"next_chunk": {0: 0}, "trained_ahead": {0: {0: [0], 1: [0]}}}
    resumed = intake()
    resumed.restore(__import__("json").loads(__import__("json").dumps(position)))  # through JSON
    for chunk in (0, 1):                                  # the generator starts at chunk 0 again
        for slot in (0, 1):
            resumed.add(group(chunk, slot, version=1))
    assert ids(resumed.take(0, version=1)) == [1, 11] and resumed.next_chunk == {0: 2}


def test_a_checkpoint_resumes_each_replica_at_the_first_chunk_any_rank_has_not_consumed():
    from types import SimpleNamespace

    from llamarl_core.executors.feeds import merge_positions
    control = SimpleNamespace(dropped=lambda i: {0: 1, 1: 0}[i], stale_groups=lambda: 3, duplicate_groups=lambda: 5)
    views = [{"next_chunk": {0: 3, 1: 5}, "trained_ahead": {0: {3: [0]}}},   # rank 0
             {"next_chunk": {0: 2, 1: 5}, "trained_ahead": {}}]              # rank 1 lags on replica 0
    state = merge_positions(views, control)
    # the max (as before) would skip rank 1's untrained groups of chunk 2: lost on resume
    assert state == {"next_chunk": {0: 2, 1: 5}, "dropped": {0: 1, 1: 0}, "positions": views,
                     "stale_dropped_groups": 3, "duplicate_dropped_groups": 5}


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
        feed.intake.take(0, version=0)
        if rank == 0:  # rank 0 is a chunk ahead
            for slot in (0, 1):
                feed.intake.add(group(1, slot, version=0))
            feed.intake.take(0, version=1)
    control = SimpleNamespace(dropped=lambda i: 0, stale_groups=lambda: 0, duplicate_groups=lambda: 0)
    state = json.loads(json.dumps(merge_positions([f.position() for f in feeds], control)))
    assert state["next_chunk"] == {"0": 1}  # the replica restarts where rank 1 is
    resumed = [RewardFeed(FeedConfig(4, 2, 1, 1), rt, rank, 2) for rank in range(2)]
    for feed in resumed:
        feed.restore(state)
    assert [f.next_chunk for f in resumed] == [{0: 2}, {0: 1}]  # rank 0 does not train chunk 1 again


def test_a_generator_serves_each_chunk_asked_again_once_and_a_restarted_one_skips_the_old_asks():
    from types import SimpleNamespace

    from llamarl_core.executors.generate_loop import GenerateLoop
    asked = []
    control = SimpleNamespace(redo_requests=lambda i: len(asked), redo_chunk=lambda i, m: asked[m])
    loop = GenerateLoop(None, None, control, replica=0, global_rank=0, max_offpolicy_steps=1,
                        should_stop=lambda: False)
    loop.generate = lambda chunk, on_group=None, attempt=0: (chunk, attempt)  # not the engine run
    assert loop.next_redo() is None
    asked += [3, 3, 5]  # two trainer ranks asked for chunk 3 at once: one copy answers both
    served = []
    while (chunk := loop.next_redo()) is not None:
        served.append(loop.generate_redo(chunk))
    asked.append(3)     # asked again after that copy was generated (its groups may still be in flight)
    served.append(loop.generate_redo(loop.next_redo()))
    # every copy its own attempt number (> 0: the chunk's first generation is attempt 0), so the
    # reward rank assembles each apart (wire/assembly.py)
    assert served == [(3, 1), (5, 3), (3, 4)] and loop.next_redo() is None
    asked.append(4)
    restarted = GenerateLoop(None, None, control, replica=0, global_rank=0, max_offpolicy_steps=1,
                             should_stop=lambda: False)
    restarted.skip_redos()  # it starts at the first chunk not consumed, at or below chunk 4
    assert restarted.next_redo() is None
    restarted.generate = loop.generate
    asked.append(6)
    assert restarted.generate_redo(restarted.next_redo()) == (6, 6)  # above every earlier copy's
