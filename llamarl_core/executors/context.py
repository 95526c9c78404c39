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

    @property
    def generator_tp(self) -> int:
        """Tensor-parallel ranks per generator replica (the plan's; 1 for the sync actor)."""
        role = next((r for r in self.plan.get("roles", []) if r["name"] == "generator"), None)
        return role["parallelism"]["tp"] if role and not self.is_sync else 1

    @property
    def generator_replicas(self) -> int:
        """Generator replicas: each sends its own rollout chunks (TP rank 0 of the replica)."""
        return len(self.ranks(self.generator_role)) // self.generator_tp

    def reward_rank_for(self, replica: int) -> int:
        rewards = self.ranks("reward")
        return rewards[replica % len(rewards)]
