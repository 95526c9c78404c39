"""What a worker process knows about itself and the run, handed to its role's executor."""
from __future__ import annotations

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
    groups: dict = field(default_factory=dict)  # "trainer" | "actor" | "weights" → ProcessGroup
    run_id: str = ""
    device: str = "cpu"                         # this rank's torch device: cpu | cuda:<LOCAL_RANK>

    def should_stop(self) -> bool:
        return self.control.finished()

    def ranks(self, role: str) -> list[int]:
        return self.role_ranks.get(role, [])

    @property
    def is_sync(self) -> bool:
        return self.cfg.algorithm.max_offpolicy_steps == 0

    @property
    def trainer_role(self) -> str:
        return "actor" if self.is_sync else "trainer"

    @property
    def generator_role(self) -> str:
        return "actor" if self.is_sync else "generator"

    def reward_rank_for(self, replica: int) -> int:
        rewards = self.ranks("reward")
        return rewards[replica % len(rewards)]
