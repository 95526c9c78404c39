"""What a rank knows about itself and its peers at run time, besides config: built by the worker
entry (runtime/worker.py) from the plan, handed to its role's components with their own config
sections (executors/pipeline.py); no component reads the plan or the whole config.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from llamarl_core.transport.control import ControlPlane
from llamarl_core.transport.links import StoreAddress
from llamarl_core.transport.timeline import Timeline


class Stopped(Exception):
    """The run ended (done or aborted) while this rank was waiting."""


@dataclass
class RoleRuntime:
    role: str
    local_rank: int
    role_ranks: dict[str, list[int]]          # role → its global ranks
    control: ControlPlane
    timeline: Timeline
    address: StoreAddress | None = None        # the controller's store: links and weight-sync endpoints
    step_timeout_s: float = 600.0              # controller.step_timeout_s: the longest any wait on a peer
    generator_tp: int = 1                      # TP ranks per generator replica (the plan's; 1 for the sync actor)
    # the role's name → its world (runtime/worker.build_groups); "generator_tp" → this rank's replica
    groups: dict = field(default_factory=dict)
    run_dir: str = ""
    device: str = "cpu"                         # this rank's torch device: cpu | cuda:<LOCAL_RANK>
    last_progress_s: float = field(default_factory=time.time)  # read by the heartbeat thread

    def progress(self) -> None:
        """The main loop is making progress: the heartbeat reports this time, not the clock."""
        self.last_progress_s = time.time()

    def should_stop(self) -> bool:
        self.progress()  # every wait loop polls this, so a rank that waits is still alive
        return self.control.finished()

    def ranks(self, role: str) -> list[int]:
        return self.role_ranks.get(role, [])

    @property
    def global_rank(self) -> int:
        return self.role_ranks[self.role][self.local_rank]

    @property
    def generator_replicas(self) -> int:
        """Generator replicas (the sync actor's ranks in sync mode); with TP, each replica's
        TP rank 0 alone sends its rollouts."""
        return len(self.ranks("generator") or self.ranks("actor")) // self.generator_tp

    def reward_rank_for(self, replica: int) -> int:
        """The reward rank (within its role) that scores generator replica `replica`."""
        return replica % len(self.ranks("reward"))
