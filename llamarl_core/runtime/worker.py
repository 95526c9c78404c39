"""Worker entry point: `torchrun ... -m llamarl_core.runtime.worker role=NAME plan=PLAN.json`.

Each process joins its role's own process group on the controller's TCPStore
(`pg/<role>/<epoch>`, rank = RANK within the role; the epoch counts the role's restarts).
No group spans two roles: cross-role traffic goes over links and weight-sync endpoints
built per membership epoch (transport/links.py, transport/ddma.py), so a restarted
generator or reward group can rejoin a run whose other roles live on. Output goes to
`<run_dir>/logs/<role>_<rank>.log`. Exit code 0 when the run ended (done, or stopped by
another role's failure), 1 when this rank failed — after recording why in the store so the
controller can name it; a rank of a role the controller may restart leaves the verdict
(restart or abort) to the controller.
"""
from __future__ import annotations

import os
import sys

from llamarl_core.runtime.kernel import die_with_parent

# First, before importing torch (seconds): if the torchrun agent dies, so does this worker.
if __name__ == "__main__":
    die_with_parent()
    if os.getppid() == 1:
        sys.exit("llamarl worker: the torchrun agent that started this worker is already gone")

import threading
import time
import traceback
from datetime import timedelta
from typing import Callable

import torch
import torch.distributed as dist

from llamarl_core.executors.context import RoleRuntime, Stopped
from llamarl_core.executors.pipeline import build_role
from llamarl_core.runtime.restarts import may_restart
from llamarl_core.plan.plan import LaunchPlan
from llamarl_core.runtime.devices import backend, rank_device
from llamarl_core.runtime.plan_file import load_plan
from llamarl_core.transport.control import ControlPlane, ControllerUnreachable, RunMismatch, connect_run
from llamarl_core.transport.links import StoreAddress
from llamarl_core.transport.membership import role_epoch
from llamarl_core.transport.tensor_parallel import new_replica_groups
from llamarl_core.transport.timeline import Timeline


def parse_argv(argv: list[str]) -> dict[str, str]:
    out = {}
    for word in argv:
        key, sep, value = word.partition("=")
        if not sep:
            raise SystemExit(f"llamarl worker: expected key=value, got {word!r}")
        out[key] = value
    for key in ("role", "plan"):
        if key not in out:
            raise SystemExit(f"llamarl worker: missing {key}=")
    return out


def redirect_output(run_dir: str, role: str, rank: int) -> str:
    os.makedirs(os.path.join(run_dir, "logs"), exist_ok=True)
    path = os.path.join(run_dir, "logs", f"{role}_{rank}.log")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
    return path


class Heartbeat(threading.Thread):
    """Reports the main loop's last progress on its own store connection; if the controller
    is gone, this process ends. The value is `progress_s()`, not the clock: a main loop that
    hangs stops the beat even though this thread lives on."""

    def __init__(self, host: str, port: int, role: str, rank: int, interval_s: float, timeout_s: float,
                 run_id: str = ""):
        super().__init__(daemon=True, name="heartbeat")
        self.control = ControlPlane(connect_run(host, port, run_id, timeout_s))
        self.role, self.rank, self.interval_s = role, rank, interval_s
        # Until the role's loop runs (start-up: joining the group, building the model), the
        # clock; then `main` points this at the loop's own progress.
        self.progress_s: Callable[[], float] = time.time
        self.stopped = threading.Event()

    def run(self) -> None:
        failures = 0
        while not self.stopped.wait(self.interval_s):
            try:
                self.control.heartbeat(self.role, self.rank, self.progress_s())
                failures = 0
            except Exception:
                failures += 1
                if failures >= 3:  # controller unreachable: never linger as an orphan
                    print(f"{self.role} rank {self.rank}: controller unreachable, exiting", flush=True)
                    os._exit(3)


def role_ranks(plan: LaunchPlan) -> dict[str, list[int]]:
    """Each role's global ranks, in plan order."""
    return {r.name: list(range(r.first_rank, r.first_rank + r.num_devices)) for r in plan.roles}


def generator_tp(plan: LaunchPlan) -> int:
    """Tensor-parallel ranks per generator replica (the plan's; 1 for the sync actor)."""
    role = plan.role("generator")
    return role.parallelism["tp"] if role else 1


def build_groups(plan: LaunchPlan, role: str) -> dict:
    """This role's groups, within its own world (every rank of the role in the same order)."""
    groups = {role: dist.group.WORLD}
    tp = generator_tp(plan) if role == "generator" else 1
    if tp > 1:  # this rank's replica group
        groups["generator_tp"] = new_replica_groups(list(range(plan.role(role).num_devices)), tp)
    return groups


def main(argv: list[str] | None = None) -> int:
    args = parse_argv(sys.argv[1:] if argv is None else argv)
    plan, cfg = load_plan(args["plan"])
    role = args["role"]
    role_plan = plan.role(role)
    rank = int(os.environ.get("RANK", "0"))
    global_rank = role_plan.first_rank + rank
    run_dir, run_id = plan.run_dir, plan.run_id
    redirect_output(run_dir, role, rank)
    c = cfg.controller
    torch.set_num_threads(role_plan.threads)
    host, port = plan.controller.host, plan.controller.port
    try:  # another run's controller (or none) is refused before touching its keys
        control = ControlPlane(connect_run(host, port, run_id, c.startup_timeout_s))
    except (ControllerUnreachable, RunMismatch) as e:
        print(f"{role} rank {rank}: {e}", flush=True)
        os._exit(2)
    # For the controller's diagnostics; it trusts the value only if this pid is in its own tree.
    control.store.set(f"pid/{role}/{rank}", str(os.getpid()))
    heartbeat = Heartbeat(host, port, role, rank, c.heartbeat_interval_s, c.startup_timeout_s, run_id)
    heartbeat.start()
    timeline = Timeline(run_dir, role, rank, control)
    print(f"{role} rank {rank} (global {global_rank}/{plan.world_size}) pid {os.getpid()} "
          f"threads {torch.get_num_threads()}", flush=True)
    code, executor = 0, None
    try:
        device = rank_device(cfg, role)
        epoch = role_epoch(control.store, role)
        dist.init_process_group(backend(cfg), store=dist.PrefixStore(f"pg/{role}/{epoch}", control.store), rank=rank,
                                world_size=role_plan.num_devices, timeout=timedelta(seconds=c.step_timeout_s))
        ctx = RoleRuntime(role, rank, role_ranks(plan), control, timeline,
                          address=StoreAddress(host, port, run_id, c.startup_timeout_s),
                          step_timeout_s=c.step_timeout_s, generator_tp=generator_tp(plan),
                          groups=build_groups(plan, role), run_dir=run_dir, device=device)
        executor = build_role(cfg, plan, ctx)  # executors/pipeline.py: the roles and their links
        heartbeat.progress_s = lambda: ctx.last_progress_s
        ctx.progress()
        executor.run()
    except Stopped:
        pass
    except BaseException as e:  # noqa: BLE001 — every failure must reach the controller
        if control.state() != "done":
            traceback.print_exc()
            reason = f"{role} rank {rank}: {type(e).__name__}: {e}"
            try:
                control.store.set(f"error/{role}/{rank}", reason)
                if not may_restart(cfg, plan, role):  # else the controller restarts the group
                    control.abort(reason)
            except Exception:
                pass
            code = 1
    finally:
        if executor is not None and hasattr(executor, "close"):
            try:
                executor.close()
            except Exception:
                traceback.print_exc()
        heartbeat.stopped.set()
        timeline.close()
        print(f"{role} rank {rank} exiting with code {code} at {time.time():.3f}", flush=True)
        sys.stdout.flush()
        try:  # a clean early exit (e.g. a non-zero trainer rank at the end) is not a death
            control.store.set(f"exit/{role}/{rank}", str(code))
        except Exception:
            pass
    # Peers may already be gone, so a collective teardown could block: leave without it.
    os._exit(code)


if __name__ == "__main__":
    main()
