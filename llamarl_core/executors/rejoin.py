"""What a rank does about restarted peers (docs/ARCHITECTURE.md, "Restart protocol").

    a link or weight-sync wait fails, or the run's membership epoch moves
      └─ await_verdict: the controller either restarts the dead role (its epoch moves:
         rebuild what touches it) or ends the run (Stopped); no verdict within
         controller.step_timeout_s → the original error ends this rank

Data position: a (re)started generator replica starts at the smallest `data/expect/<replica>/<rank>`
(each trainer rank's next chunk of it, or the resumed position): what its predecessor held is
generated again, and what arrives twice is skipped by the trainer (executors/intake.py).
"""
from __future__ import annotations

import time

from llamarl_core.executors.context import RoleRuntime, Stopped
from llamarl_core.executors.routing import chunk_slices_for_trainers
from llamarl_core.transport.links import Endpoint, Links
from llamarl_core.transport.membership import Watch, role_epoch

POLL_S = 0.05


def endpoint(ctx: RoleRuntime, role: str, rank: int) -> Endpoint:
    """`role` rank `rank` as it is now (its current membership epoch)."""
    return Endpoint(role, rank, role_epoch(ctx.control.store, role))


def my_endpoint(ctx: RoleRuntime) -> Endpoint:
    return endpoint(ctx, ctx.role, ctx.local_rank)


def links(ctx: RoleRuntime) -> Links:
    return Links(ctx.address, ctx.step_timeout_s)


def watch(ctx: RoleRuntime, roles: list[str]) -> Watch:
    return Watch(ctx.control.store, [r for r in roles if ctx.ranks(r)])


def await_verdict(ctx: RoleRuntime, watched: Watch, error: BaseException) -> set[str]:
    """After `error` on a cross-role channel: the restarted roles once the controller restarts
    one; Stopped once it ends the run; `error` again if neither within step_timeout_s."""
    deadline = time.monotonic() + ctx.step_timeout_s
    while time.monotonic() < deadline:
        if ctx.should_stop():
            raise Stopped()
        changed = watched.poll(force=True)
        if changed:
            print(f"{ctx.role} rank {ctx.local_rank}: {', '.join(sorted(changed))} restarted "
                  f"after: {error}", flush=True)
            return changed
        time.sleep(POLL_S)
    raise error


def start_chunk(ctx: RoleRuntime, replica: int, prompts_per_step: int, group_size: int) -> int:
    """Where generator replica `replica` (re)starts: the first chunk of it that some trainer
    rank has not consumed yet; the resumed (or initial) position before any was consumed."""
    trainers = len(ctx.ranks("trainer"))
    ranks = [j for j, _, _ in chunk_slices_for_trainers(replica, ctx.generator_replicas, trainers,
                                                         prompts_per_step, group_size)]
    seen = [ctx.control.expected(replica, j) for j in ranks]
    if ranks and all(s is not None for s in seen):
        return min(seen)
    return ctx.control.next_chunk(replica)
