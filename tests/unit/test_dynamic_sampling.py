"""algorithm.dynamic_sampling: groups whose rewards are all equal never reach the learner; the
step is filled from further chunks, in lockstep across trainer ranks (fake feeds, no processes)."""
import pytest
import torch

from llamarl_core.algorithms.dynamic_sampling import group_rows, informative_groups, pick_groups
from llamarl_core.config.load import load_config
from llamarl_core.executors.resample import DynamicSampling
from llamarl_core.wire.rollout import Rollout

G = 2  # samples per prompt


def _chunk(chunk: int, rewards: list[list[float]], lens: list[int] | None = None) -> Rollout:
    """One chunk: a prompt group per reward list; example id = 10 * chunk + group."""
    n = G * len(rewards)
    lens = torch.tensor(lens or [3] * n)
    return Rollout(torch.ones(n, 8, dtype=torch.long), torch.full((n,), 2), lens, torch.zeros(n, 6),
                   torch.tensor([r for group in rewards for r in group]),
                   torch.tensor([10 * chunk + g for g in range(len(rewards)) for _ in range(G)]), 0, 0, chunk)


class FakeFeed:
    """Hands out `chunks` in order; `others` are the other ranks' (informative, held) per round."""

    def __init__(self, chunks, rank=0, world=1, others=()):
        self.chunks, self.rank, self.world, self.others = list(chunks), rank, world, list(others)
        self.more = 0

    def collect(self, step, version):
        c = self.chunks.pop(0)
        return c, torch.full((c.num_rows,), float(c.chunk)), 0.5  # staleness tags the chunk

    def collect_more(self, step, version):
        self.more += 1
        return self.collect(step, version)

    def agree(self, key, value):
        return [value, *(self.others.pop(0) if self.others else [])]


def _sampler(feed, *overrides):
    cfg = load_config("cpu_tiny", [f"algorithm.group_size={G}", "algorithm.prompts_per_step=4",
                                   "algorithm.dynamic_sampling=true", *overrides])
    return DynamicSampling(feed, cfg.algorithm, cfg.generation.max_new_tokens)


def test_the_pure_rules_find_informative_groups_and_their_rows():
    rewards = torch.tensor([1.0, 1, 0, 1, 0.5, 0.5, 0, 1])
    assert informative_groups(rewards, 2).tolist() == [False, True, False, True]
    assert pick_groups(torch.tensor([False, True, False, True, True]), 2).tolist() == [1, 3]
    assert group_rows(torch.tensor([1, 3]), 2).tolist() == [2, 3, 6, 7]


def test_uniform_groups_are_dropped_and_further_chunks_fill_the_step():
    # quota 4 groups. chunk 0: groups 1 and 3 informative; chunk 1: groups 0, 2, 3. After one more
    # round 5 are held: the first 4 in arrival order are trained (c0g1, c0g3, c1g0, c1g2); c1g3 is
    # surplus. 8 groups held, 4 trained: half dropped.
    feed = FakeFeed([_chunk(0, [[1, 1], [1, 0], [0, 0], [0, 1]]),
                     _chunk(1, [[0, 1], [1, 1], [1, 0], [0, 1]])])
    sampler = _sampler(feed)
    batch, staleness, waited_s = sampler.collect(0, 0)
    assert batch.example_ids[::G].tolist() == [1, 3, 10, 12]
    assert not (batch.rewards.view(-1, G) == batch.rewards.view(-1, G)[:, :1]).all(dim=1).any()
    assert staleness.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]  # each row kept its own chunk's staleness
    assert feed.more == 1 and waited_s == 1.0
    assert sampler.metrics == {"trainer/resample_rounds": 1, "trainer/trained_groups": 4,
                               "trainer/dropped_groups_frac": 0.5}


def test_a_full_step_takes_no_extra_chunk():
    feed = FakeFeed([_chunk(0, [[1, 0]] * 4)])
    batch, _, _ = _sampler(feed).collect(0, 0)
    assert feed.more == 0 and batch.num_rows == 4 * G


def test_the_rounds_stop_at_max_resample_rounds_and_nothing_uniform_is_trained():
    # every group scores alike: 1 + 2 rounds, then the step trains no row at all
    feed = FakeFeed([_chunk(c, [[0, 0]] * 4) for c in range(3)])
    sampler = _sampler(feed, "algorithm.max_resample_rounds=2")
    batch, staleness, _ = sampler.collect(0, 0)
    assert feed.more == 2 and batch.num_rows == 0 and staleness.numel() == 0
    assert sampler.metrics["trainer/dropped_groups_frac"] == 1.0


def test_data_parallel_ranks_take_rounds_together_and_train_equal_shares():
    # rank 0 of 2 (quota 2): its first chunk already holds 2 informative groups, but rank 1
    # reports (0 of 2), so rank 0 takes another chunk too (the same chunks of a replica go to
    # every rank it feeds). Round 1: rank 1 reports (1 of 4); rounds run out (max 1): both train
    # min(2, 2, 1) = 1 group, so both run the same micro-batches.
    feed = FakeFeed([_chunk(0, [[1, 0], [0, 1]]), _chunk(1, [[1, 0], [1, 1]])], rank=0, world=2,
                    others=[[[0, 2]], [[1, 4]]])
    sampler = _sampler(feed, "algorithm.max_resample_rounds=1")
    batch, _, _ = sampler.collect(0, 0)
    assert feed.more == 1 and batch.example_ids[::G].tolist() == [0]
    assert sampler.metrics == {"trainer/resample_rounds": 1, "trainer/trained_groups": 2,
                               "trainer/dropped_groups_frac": pytest.approx(1 - 2 / 8)}


def test_with_the_overlong_penalty_lengths_make_an_all_correct_group_informative():
    # max_new_tokens 8, buffer 4: lengths 3 and 8 -> penalties 0 and -1, so rewards (1, 1) train
    feed = FakeFeed([_chunk(0, [[1, 1], [1, 1], [1, 0], [0, 1]], lens=[3, 8, 3, 3, 3, 3, 3, 3])])
    sampler = _sampler(feed, "generation.max_new_tokens=8", "algorithm.overlong=penalty",
                       "algorithm.overlong_buffer_tokens=4", "algorithm.max_resample_rounds=0")
    batch, _, _ = sampler.collect(0, 0)
    assert batch.example_ids[::G].tolist() == [0, 2, 3]
