"""One step of the trainer loop, apart from how the trainer is wired (executors/trainer.py).

    rows of step v   ← feed.collect(v, version)          waits for the reward role (or generates, k = 0);
                                                         with stream_groups, TrainStep.add and early
                                                         micro-batches on its groups as they come
    every rank has its rows ← feed.wait_for_peers(v)     before any collective of the step
    TrainStep.finish(rows, staleness)                    AIPO over the trainer ranks (train_step.py)
    version += 1 → publisher.publish(version)            not after the last step

It talks only to a `RolloutFeed` and a `WeightPublisher` (executors/ports.py), so a test drives a
real `Learner` with a fake feed and publisher in one process (tests/unit/test_pipeline_fakes.py).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Optional

from llamarl_core.executors.ports import RolloutFeed, WeightPublisher
from llamarl_core.executors.train_step import TrainStep
from llamarl_core.wire.rollout import Rollout


@dataclass
class StepDone:
    batch: Rollout
    metrics: dict
    waited_s: float
    version: int            # the version the step made
    last: bool
    sync: Optional[dict]    # the publish's metrics; None when nothing was published (last step)


def _no_span(state: str, **info):
    return contextlib.nullcontext()


def rl_step(feed: RolloutFeed, learner, publisher: WeightPublisher, step: int, version: int,
            is_last: Callable[[], bool], sampler=None, span: Callable = _no_span,
            stream_groups: bool = False) -> StepDone:
    """`sampler`: what collects the rows (the feed, or dynamic sampling's rounds of it).
    `stream_groups`: micro-batches start on the groups as the feed takes them (one trainer rank,
    one update per batch: config/streaming.py), each run in a "train" span of its own."""
    if stream_groups:  # the step (its learning rate) starts before its first rows arrive
        train = TrainStep(learner, early=True)

        def arrived(groups: list[Rollout], staleness) -> None:
            with span("train", step=step):  # the rows' advantages and masks, then full micro-batches
                train.add(groups, staleness)
                train.run_ready()

        def idle() -> None:  # nothing arrived: train on the rows held instead of waiting
            if train.waiting:
                with span("train", step=step):
                    train.run_waiting()
        batch, staleness, waited_s = feed.collect(step, version, on_groups=arrived, on_idle=idle)
    else:
        batch, staleness, waited_s = (sampler or feed).collect(step, version)
        feed.wait_for_peers(step)
        train = TrainStep(learner)
    with span("train", step=step):
        if not stream_groups:
            train.add(batch, staleness)
        metrics = train.finish(batch, staleness)
    version += 1
    last = is_last()
    sync = None if last else publisher.publish(version)
    return StepDone(batch, metrics, waited_s, version, last, sync)
