"""One rank of a tensor-parallel generator replica: where it sits and the lockstep rule.

A replica of `tp` ranks runs one engine split across them (transport/tensor_parallel.py).
Every all-reduce inside a chunk needs all `tp` ranks, and so does every weight sync (the
weights group holds every generator rank), so the ranks must take the same actions in the
same order, or one waits in a sync while another waits in an all-reduce: a deadlock. Hence:

    TP rank 0 (leader)                       TP ranks 1.. (followers)
      decides like a lone generator            ─ wait for step n in the store
      announces step n in the store  ───────▶  ─ do exactly that step
      does it (sync / stream chunks)           ─ n += 1
      sends the rollout; publishes stats       (their rollout copy is dropped)

Replica i is the generator ranks [i·tp, (i+1)·tp); with tp = 1 every rank leads its own
replica and nothing is announced.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from llamarl_core.executors.context import RoleRuntime
from llamarl_core.transport.membership import role_epoch
from llamarl_core.transport.tensor_parallel import broadcast_flag, make_token_sync, shard_model_


@dataclass
class ReplicaRank:
    replica: int
    tp_rank: int
    tp: int
    num_replicas: int
    group: object = None          # the replica's process group (tp > 1)
    leader_rank: int = 0          # TP rank 0's rank in the generator role's world

    @classmethod
    def of(cls, ctx: RoleRuntime) -> "ReplicaRank":
        tp = ctx.generator_tp
        replica, tp_rank = divmod(ctx.local_rank, tp)
        return cls(replica, tp_rank, tp, ctx.generator_replicas, ctx.groups.get("generator_tp"), replica * tp)

    @property
    def is_leader(self) -> bool:
        return self.tp_rank == 0

    def agree(self, flag: bool) -> bool:
        """TP rank 0's `flag` on every rank of the replica (one tiny broadcast; tp = 1: `flag`)."""
        if self.tp == 1:
            return flag
        return broadcast_flag(flag, self.leader_rank, self.group)

    def shard(self, model):
        """Shard `model` in place for this TP rank; returns the engine's token_sync (or None)."""
        if self.tp == 1:
            return None
        shard_model_(model, self.tp_rank, self.tp, self.group)
        return make_token_sync(self.group, self.leader_rank)


class ReplicaSteps:
    """The leader's announced steps, numbered from 0, in the control store."""

    def __init__(self, ctx: RoleRuntime, rank: ReplicaRank, poll_s: float):
        self.ctx, self.rank, self.poll_s = ctx, rank, poll_s
        self.n = 0
        # a restarted replica numbers its steps from 0 again, under its own epoch
        self.key = f"{rank.replica}@{role_epoch(ctx.control.store, 'generator')}"

    def announce(self, do: str, **fields) -> None:
        if self.rank.tp > 1:
            self.ctx.control.announce_replica_step(self.key, self.n, {"do": do, **fields})
            self.n += 1

    def next(self) -> dict:
        """The leader's next step. {"do": "stop"} once the run was aborted, or once it ended and
        the leader announced nothing for `controller.step_timeout_s` (a leader that died)."""
        control, timeout_s = self.ctx.control, self.ctx.step_timeout_s
        ended_at = None
        while True:
            step = control.replica_step(self.key, self.n)
            if step is not None:
                self.n += 1
                return step
            state = control.state()
            if state == "aborted":
                return {"do": "stop"}
            if state == "done":
                ended_at = ended_at or time.monotonic()
                if time.monotonic() - ended_at > timeout_s:
                    return {"do": "stop"}
            self.ctx.progress()  # waiting on a live leader is progress (the heartbeat reads it)
            time.sleep(self.poll_s)
