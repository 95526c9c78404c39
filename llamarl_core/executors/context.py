"""What a worker process knows about itself and the run, handed to its role's executor."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from llamarl_core.config.schema import LlamaRLConfig
from llamarl_core.transport.control import ControlPlane
from llamarl_core.transport.timeline import Timeline


class Stopped(Exception):
    """The run ended (done or aborted) while this rank was waiting."""


@dataclass
class WorkerContext:
    cfg: LlamaRLConfig
    plan: dict
    run_dir: str
    role: str
    local_rank: int
    global_rank: int
    role_ranks: dict[str, list[int]]          # role → its global ranks
    control: ControlPlane
    timeline: Timeline
    # the role's name → its world (runtime/worker.build_groups); "generator_tp" → this rank's replica
    groups: dict = field(default_factory=dict)
    run_id: str = ""
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
    def is_sync(self) -> bool:
        return self.cfg.algorithm.max_offpolicy_steps == 0

    @property
    def generator_tp(self) -> int:
        """Tensor-parallel ranks per generator replica (the plan's; 1 for the sync actor)."""
        role = next((r for r in self.plan.get("roles", []) if r["name"] == "generator"), None)
        return role["parallelism"]["tp"] if role else 1

    @property
    def generator_replicas(self) -> int:
        """Generator replicas (the sync actor's ranks in sync mode); with TP, each replica's
        TP rank 0 alone sends its rollouts."""
        return len(self.ranks("generator") or self.ranks("actor")) // self.generator_tp

    def reward_rank_for(self, replica: int) -> int:
        """The reward rank (within its role) that scores generator replica `replica`."""
        return replica % len(self.ranks("reward"))
