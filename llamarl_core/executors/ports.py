"""The seams between roles: what each role needs of the others, as small `Protocol`s.

Roles never hold each other: a trainer reads rows from a `RolloutFeed` and hands versions to a
`WeightPublisher`; a generator takes versions from a `WeightReceiver`; both read and write the
few run-wide facts they share (published version, held versions, extra chunks, data
positions) through a `ControlStore`. The runtime's implementations are `executors/feeds.py`
(RewardFeed, OwnChunks), `executors/publishers.py` (WeightSync, InPlace), `transport/ddma.py`
(DdmaReceiver) and `transport/control.py` (ControlPlane over the TCPStore); tests wire fakes
of them in one process (tests/unit/test_pipeline_fakes.py). The pipeline that joins them is
drawn in executors/pipeline.py.
"""
from __future__ import annotations

from typing import Callable, Protocol

import torch

from llamarl_core.wire.rollout import Rollout

Collected = tuple[Rollout, torch.Tensor, float]  # (rows, staleness per row, seconds waited)


class RolloutFeed(Protocol):
    """Where the trainer loop reads step v's rows from (one per mode, executors/feeds.py)."""

    replicas: int                                  # generator replicas feeding the run
    next_chunk: dict[int, int]                     # replica → its next chunk to train (data position)
    on_wait: Callable[[], set[str]]                # the trainer's: called while waiting for rows
    on_broken: Callable[[BaseException], set[str]]

    def position(self) -> dict: ...                # this rank's data position (JSON), for checkpoints
    def restore(self, state: dict) -> None: ...    # from a checkpoint's state
    def start(self) -> None: ...                   # once version 0 is published
    def collect(self, step: int, version: int) -> Collected: ...
    def collect_more(self, step: int, version: int) -> Collected: ...  # counted as extra
    def agree(self, key: str, value) -> list: ...  # every trainer rank's value, in rank order
    def wait_for_peers(self, step: int) -> None: ...
    def close(self) -> None: ...


class WeightPublisher(Protocol):
    """How the trainer hands out version v (executors/publishers.py); returns sync metrics."""

    on_broken: Callable[[BaseException], set[str]] | None

    def publish(self, version: int) -> dict: ...
    def rejoin(self, version: int) -> dict: ...    # new generators: send them `version`
    def close(self) -> None: ...


class SyncStatsLike(Protocol):
    version: int
    seconds: float
    gbps: float


class WeightReceiver(Protocol):
    """The generator's end of the weight sync (transport/ddma.py: DdmaReceiver)."""

    def ready(self) -> bool: ...                   # a version can be taken now without waiting
    def receive(self) -> SyncStatsLike: ...        # adopt it (blocks until it has arrived)
    def close(self) -> None: ...


class ControlStore(Protocol):
    """The part of the control plane (transport/control.py) the roles use."""

    def finished(self) -> bool: ...
    def state(self) -> str: ...
    def mark_done(self) -> None: ...
    def publish_version(self, version: int) -> None: ...
    def published_version(self) -> int: ...
    def set_held(self, global_rank: int, version: int) -> None: ...
    def add_extra(self, replica: int, n: int = 1) -> int: ...  # chunks taken beyond one a step
    def extra(self, replica: int) -> int: ...
    def next_chunk(self, replica: int) -> int: ...
    def set_expected(self, replica: int, trainer_rank: int, chunk: int) -> None: ...
    def expected(self, replica: int, trainer_rank: int) -> int | None: ...
    def add_duplicate_groups(self, n: int) -> int: ...  # copies of groups trained/buffered already
    def duplicate_groups(self) -> int: ...
    def set_stats(self, role: str, rank: int, stats: dict) -> None: ...
    def set_json(self, key: str, value) -> None: ...
    def get_json(self, key: str, default=None): ...
    def get_int(self, key: str) -> int: ...
