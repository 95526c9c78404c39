"""The controller's side of a restart: a dead generator or reward group is replaced, the
run goes on.

    a generator (or reward) rank died (pid gone, torchrun exited, error reported, or hung)
      └─ restarts/<role> < controller.max_restarts?
           no  → the run ends naming role and rank (as before restarts existed)
           yes → stop what is left of that role's torchrun group (only that one)
                 forget its ranks' pid/hb/error/exit/status keys
                 membership/generator += 1, then membership/epoch += 1   (survivors look here)
                 log "restart generator #n ...", exec the role's torchrun command again

New generator ranks join `pg/generator/<epoch>` among themselves, announce themselves under
`xfer/<epoch>/joined/`, receive the trainer's current weights on the DDMA endpoints of
their epoch and start at the first chunk the trainer has not consumed; new reward ranks
open links of their epoch, and the generators regenerate what the dead ones held
(executors/rejoin.py). The trainer (or sync actor) never restarts.
"""
from __future__ import annotations

import os
import time

from llamarl_core.runtime import procs
from llamarl_core.transport.control import ControlPlane
from llamarl_core.transport.membership import bump_role

RESTARTABLE = ("generator", "reward")
RANK_KEYS = ("pid", "hb", "error", "exit", "status", "lost")


def may_restart(cfg, plan, role: str) -> bool:
    """Whether a dead `role` group is restarted rather than ending the run (single node only:
    on several nodes the group's other nodes would have to restart theirs too)."""
    return role in RESTARTABLE and cfg.controller.max_restarts > 0 and plan.nodes == 1


def stop_role(role_procs: list, control: ControlPlane, role: str, num_ranks: int, plan_path: str,
              pids: list[int] = ()) -> None:
    """End every process of the role's old group (agent and workers), then forget its ranks.
    `pids`: its workers' pids as the controller verified them (never read here from the store);
    orphaned workers are found in this process's tree by their command line."""
    procs.stop_all(role_procs, list(pids), grace_s=5.0)
    procs.kill_trees([p.pid for p in role_procs])
    procs.kill_mentioning(f"role={role} plan={plan_path}")
    deadline = time.time() + 10.0
    while procs.pids_mentioning(f"role={role} plan={plan_path}") and time.time() < deadline:
        time.sleep(0.05)
    for rank in range(num_ranks):
        for key in RANK_KEYS:
            control.store.delete_key(f"{key}/{role}/{rank}")


def restart_role(controller, role: str, why: str) -> None:
    """Replace `role`'s torchrun group(s) on this node (see the module docstring)."""
    c = controller
    n = c.restarts[role] = c.restarts.get(role, 0) + 1
    plan_role = next(r for r in c.plan.roles if r.name == role)
    slots = [i for i, name in enumerate(c.role_of_proc) if name == role]
    plan_path = os.path.join(c.run_dir, "plan.json")
    ranks = [(role, rank) for rank in range(plan_role.num_devices)]
    pids = [c.own_pids.pop(k) for k in ranks if k in c.own_pids]
    stop_role([c.procs[i] for i in slots], c.control, role, plan_role.num_devices, plan_path, pids)
    epoch = bump_role(c.control.store, role)
    print(f"controller: restart {role} #{n} of controller.max_restarts={c.cfg.controller.max_restarts} "
          f"(membership epoch {epoch}): {why}", flush=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": str(plan_role.threads)}
    log = os.path.join(c.run_dir, "logs", f"{role}.torchrun.log")
    commands = [cmd for cmd, node in zip(plan_role.commands, plan_role.nodes) if node == 0]
    for i, cmd in zip(slots, commands):
        c.procs[i] = procs.start_role(cmd, log, env)
    c.started_at[role] = time.time()
