"""Dynamic sampling in the runtime (`algorithm.dynamic_sampling=true`): a step's rows are
collected in rounds until it holds `prompts_per_step` informative groups (DAPO, section 3.2).

    round 0        feed.collect(step)        one chunk of each source replica, as without the knob
    while short    feed.agree(...)           every trainer rank reports (informative, held) groups;
                                             if any rank holds fewer than its quota (its share of
                                             prompts_per_step), every rank takes one more chunk of
                                             each of its source replicas: feed.collect_more
                                             (at most algorithm.max_resample_rounds rounds)
    train          the first n informative groups of each rank, in arrival order,
                   n = min over ranks of min(quota, informative groups it holds)

Why every invariant holds:
- Staleness: each extra chunk is counted (`extra/<replica>`) before it is taken, so chunk n is
  still trained at step n - extra_i, the step executors/admission.py let it start for: every
  row stays within k versions.
- Data position: next_chunk moves past every consumed chunk, so a resume starts right after the
  last one consumed, and trained_examples.jsonl lists exactly the groups trained.
- Data-parallel ranks: the rounds are decided together, so every rank fed by a replica consumes
  the same chunks of it (the reward role sends each of them its slice of every chunk); and every
  rank trains the same number of groups, hence the same micro-batches (FSDP2 gathers weights in
  each forward; all ranks must run the same collectives). A rank left with more informative
  groups than the poorest rank trains only as many: the price of lockstep, paid only when the
  rounds run out.
- Sync mode (k = 0): the actor generates each extra chunk at once with the weights it trains, so
  its rows are on-policy; nothing else changes.
Groups beyond the quota are not trained; the step's `dropped_groups_frac` counts them with the
uninformative ones.
"""
from __future__ import annotations

import torch

from llamarl_core.algorithms.dynamic_sampling import group_rows, informative_groups, pick_groups
from llamarl_core.algorithms.overlong import training_rewards
from llamarl_core.config.schema import AlgorithmConfig
from llamarl_core.executors.routing import prompt_range
from llamarl_core.wire.rollout import Rollout, concat


class DynamicSampling:
    """`collect(step, version)` like a feed's, returning only informative groups; `metrics` holds
    the step's dynamic-sampling numbers for metrics.jsonl."""

    def __init__(self, feed, algorithm: AlgorithmConfig, max_new_tokens: int):
        a = algorithm
        self.feed, self.algorithm, self.max_new_tokens = feed, algorithm, max_new_tokens
        lo, hi = prompt_range(feed.rank, feed.world, a.prompts_per_step)
        self.quota = hi - lo  # groups this rank trains in a full step
        self.metrics: dict[str, float] = {}

    def _informative(self, batch: Rollout) -> torch.Tensor:
        """[P] whether each group's training rewards (the overlong penalty included) differ."""
        a = self.algorithm
        rewards = training_rewards(batch.rewards, batch.completion_lens, a.overlong, self.max_new_tokens,
                                   a.overlong_buffer_tokens)
        return informative_groups(rewards, a.group_size)

    def collect(self, step: int, version: int) -> tuple[Rollout, torch.Tensor, float]:
        a = self.algorithm
        batch, staleness, waited_s = self.feed.collect(step, version)
        parts, ages, rounds = [batch], [staleness], 0
        while True:
            informative = self._informative(concat(parts))
            views = self.feed.agree(f"resample/{step}/{rounds}", [int(informative.sum()), len(informative)])
            if rounds == a.max_resample_rounds or all(found >= self.quota for found, _ in views):
                break
            rounds += 1
            more, more_staleness, more_waited_s = self.feed.collect_more(step, version)
            parts.append(more)
            ages.append(more_staleness)
            waited_s += more_waited_s
        n = min(min(self.quota, found) for found, _ in views)
        rows = group_rows(pick_groups(informative, n), a.group_size)
        held = sum(total for _, total in views)
        self.metrics = {"trainer/resample_rounds": rounds, "trainer/trained_groups": n * len(views),
                        "trainer/dropped_groups_frac": 1.0 - n * len(views) / held}
        return concat(parts).select(rows), torch.cat(ages)[rows], waited_s
