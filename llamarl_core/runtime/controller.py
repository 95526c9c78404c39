"""The controller: one process that launches every role group and watches them.

    llamarl train recipe=R
      ├─ plan (pure; refuses what the config alone shows)
      ├─ prelaunch checks of the files (runtime/prelaunch.py), before anything is written
      ├─ lock run_dir (runtime/run_lock.py: a second run on it exits 2 naming this pid)
      ├─ TCPStore server (loopback by default; a busy port falls back to a free one)
      │    → run_dir/plan.json (with the store's address and the run id), config.yaml
      ├─ exec the plan's torchrun command per role (node 0's on a multi-node plan)
      └─ supervise: exit codes, worker pids, heartbeats, run/state; live view
           one dead, failed or silent generator or reward rank → restart that group
           (runtime/restarts.py, up to controller.max_restarts); any other → abort with its
           role, rank and log tail;
           everything it started is ended before it returns (no orphans): it is a child
           subreaper, so orphaned workers stay in its tree, and it signals only that tree;
           a pid read from the store is used only if it descends from this process
"""
from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass, field

import torch.distributed as dist

from llamarl_core.config.schema import LlamaRLConfig
from llamarl_core.observe import end_reason
from llamarl_core.observe.end_reason import EndReason
from llamarl_core.plan.plan import LaunchPlan
from llamarl_core.rewards import proc_tree
from llamarl_core.runtime import kernel, prelaunch, procs, restarts, resume, run_lock, zygote
from llamarl_core.runtime.run_dir import write_run_files
from llamarl_core.transport.control import ControlPlane, bind_store, serve_run

POLL_S = 0.25
DONE_GRACE_S = 30.0
STORE_ERRORS = (RuntimeError, OSError)  # torch's DistStoreError is a RuntimeError


@dataclass
class RunResult:
    ok: bool
    run_dir: str
    message: str = ""
    failed: tuple[str, int] | None = None        # (role, rank)
    log_tail: str = ""
    metrics: dict = field(default_factory=dict)  # last metrics line
    end: EndReason | None = None                 # a failure's reason (success: the trainer's, in summary.json)


def start_store(host: str, port: int) -> dist.TCPStore:
    """The controller's store, listening on `host` only (TCPStore alone binds every
    interface, whatever host it is given); a busy configured port is never fatal."""
    try:
        return bind_store(host, port)
    except (RuntimeError, OSError) as e:
        if port == 0:
            raise
        print(f"controller: port {port} on {host} unavailable ({e}); using a free port")
        return bind_store(host, 0)


class Interrupted(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C's KeyboardInterrupt, remembering which signal it was."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_interrupt(signum, frame):
    raise Interrupted(signum)


class Controller:
    def __init__(self, cfg: LlamaRLConfig, plan: LaunchPlan, run_dir: str, view=None):
        self.cfg, self.plan, self.run_dir, self.view = cfg, plan, run_dir, view
        self.ranks = [(r.name, i) for r in plan.roles for i in range(r.num_devices)]
        self.procs: list = []
        self.role_of_proc: list[str] = []
        self.restarts: dict[str, int] = {}        # role → times restarted
        self.started_at: dict[str, float] = {}    # role → when its group was (re)started
        self.own_pids: dict[tuple[str, int], int] = {}  # (role, rank) → its pid, seen in our tree
        self._ignored: set[str] = set()           # store pids already reported as not ours

    def run(self) -> RunResult:
        """Check, launch, supervise, and always end every process it started."""
        prelaunch.check_before_launch(self.cfg)  # ConfigError (exit 2) before anything exists
        with run_lock.acquire(self.run_dir):  # held until this returns, whatever happens
            os.makedirs(os.path.join(self.run_dir, "logs"), exist_ok=True)
            return self._run()

    WHO, WHERE = "the controller", ""  # how messages name this process (node 0 says so)

    def _run(self) -> RunResult:
        """The one launch-supervise-clean loop; `NodeController` changes only its hooks
        (`_open_store`, `_launch`, `_before_sweep`, and the per-node checks of `_find_problem`)."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _raise_interrupt)  # `kill` cleans up like Ctrl-C
        store, self.run_id = self._open_store()
        self.control = ControlPlane(serve_run(store, self.run_id))
        resume.restore_controller_state(self.control, self.run_dir, self.cfg.run.resume)
        proc_tree.become_subreaper()  # orphaned workers stay in our tree, where the final sweep finds them
        children_before = proc_tree.children_of(os.getpid())
        result = RunResult(False, self.run_dir, f"{self.WHO} stopped before supervising")
        try:
            self._launch()
            result = self._supervise()
        except KeyboardInterrupt as e:
            reason = f"interrupted (Ctrl-C or SIGTERM){self.WHERE}"
            self._abort_quietly(reason)
            result = RunResult(False, self.run_dir, reason,
                               end=end_reason.stopped_by_signal(getattr(e, "signum", signal.SIGINT)))
        finally:
            procs.stop_all(self.procs, self._worker_pids(), grace_s=10.0 if result.ok else 5.0)
            self._before_sweep(result.ok)
            self._sweep_tree(children_before)
            self._sweep_shm()
        if result.end is not None:  # a signal or an error: only the controller sees those
            end_reason.record(self.run_dir, result.end)
        try:
            result.metrics = self.control.get_json("metrics/latest", {}) or {}
        except STORE_ERRORS:
            pass  # the failure is already in result.message
        return result

    def _open_store(self) -> tuple[dist.TCPStore, str]:
        """The store and the run id; writes plan.json and config.yaml with its address."""
        c = self.cfg.controller
        store = start_store(c.host, c.port)
        write_run_files(self.run_dir, self.cfg, self.plan, c.host, store.port)
        return store, self.plan.run_id

    def _launch(self) -> None:
        """Node 0's torchrun lines of the plan (other nodes run their own)."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        for role in self.plan.roles:
            env["OMP_NUM_THREADS"] = str(role.threads)
            for cmd, node in zip(role.commands, role.nodes):
                if node != 0:
                    continue
                self.procs.append(procs.start_role(cmd, self._torchrun_log(role.name), dict(env)))
                self.role_of_proc.append(role.name)

    def _before_sweep(self, ok: bool) -> None:
        """Between stopping the workers and the final sweep (node 0 waits for the other nodes)."""

    def _abort_quietly(self, reason: str) -> None:
        try:
            self.control.abort(reason)
        except STORE_ERRORS:
            pass

    # ---- supervision --------------------------------------------------------------------
    def _supervise(self) -> RunResult:
        try:
            return self._watch()
        except STORE_ERRORS as e:  # the store lives in this process: say so, not "aborted"
            message = f"controller: its store stopped answering ({type(e).__name__}: {e})"
            return RunResult(False, self.run_dir, message, end=end_reason.failed(message))

    def _watch(self) -> RunResult:
        c = self.cfg.controller
        t_start, done_at = time.time(), None
        while True:
            if self.view is not None:
                self.view.update(self.control, self.plan)
            state = self._state()
            if state == "aborted":
                reason = self.control.abort_reason() or "a role aborted the run"
                killed = self._killed_rank()
                if killed:  # its peers' connection errors often report first: name the cause
                    role, rank = killed
                    return self._failure(f"{self._death(role, rank)}; then {reason}", role, rank)
                return self._failure(reason)
            if state == "done":
                done_at = done_at or time.time()
                if all(p.poll() is not None for p in self.procs) or time.time() - done_at > DONE_GRACE_S:
                    return RunResult(True, self.run_dir, "done")
            else:
                problem = self._find_problem(time.time() - t_start, c)
                if problem and self._may_restart(problem[1]):
                    restarts.restart_role(self, problem[1], problem[0])
                elif problem:
                    return self._failure(*problem)
            time.sleep(POLL_S)

    def _find_problem(self, elapsed: float, c) -> tuple | None:
        for name, p in zip(self.role_of_proc, self.procs):
            code = p.poll()
            if code is not None and code != 0 and self._state() != "done":
                who = self._killed_rank() or self._first_error() or self._dead_rank(name) or (name, 0)
                return (f"{self._death(*who)} (its torchrun exited with code {code})", *who)
        for role, rank in self.ranks:
            if self.control.get_str(f"exit/{role}/{rank}") == "0":
                continue  # finished its part cleanly
            pid = self._dead_pid(role, rank)
            if pid and self._state() != "done":
                err = self.control.get_str(f"error/{role}/{rank}")
                return (self._death(role, rank, pid) + (f": {err}" if err else ""), role, rank)
            beat = self.control.last_heartbeat(role, rank)
            since = time.time() - self.started_at[role] if role in self.started_at else elapsed
            if beat is None and since > c.startup_timeout_s:
                return (f"role {role} rank {rank} did not start within controller.startup_timeout_s="
                        f"{c.startup_timeout_s:g}", role, rank)
            if beat is not None and time.time() - beat > c.heartbeat_timeout_s:
                return (f"role {role} rank {rank} made no progress for {time.time() - beat:.0f} s > "
                        f"controller.heartbeat_timeout_s={c.heartbeat_timeout_s:g} (hung?)", role, rank)
        return None

    def _may_restart(self, role: str) -> bool:
        return (restarts.may_restart(self.cfg, self.plan, role) and self._state() == "running"
                and self.restarts.get(role, 0) < self.cfg.controller.max_restarts)

    def _failure(self, message: str, role: str | None = None, rank: int | None = None) -> RunResult:
        self.control.abort(message)
        if role is None:
            found = self._first_error()
            role, rank = found if found else (None, None)
        log_tail = ""
        if role is not None:
            log_tail = procs.tail(os.path.join(self.run_dir, "logs", f"{role}_{rank}.log"))
        return RunResult(False, self.run_dir, message, (role, rank) if role else None, log_tail,
                         end=end_reason.failed(message, role, rank))

    def _death(self, role: str, rank: int, pid: str | None = None) -> str:
        """'role R rank K (pid P) was killed by SIGKILL' (its torchrun log says how), else 'died'."""
        pid = pid or str(self.own_pids.get((role, rank), ""))
        cause = procs.exit_cause(self._torchrun_log(role), pid) if pid else ""
        who = f"role {role} rank {rank}" + (f" (pid {pid})" if pid else "")
        if cause.startswith("killed"):
            return f"{who} was {cause}"
        return f"{who} {cause}" if cause else f"{who} died"

    def _torchrun_log(self, role: str) -> str:
        return os.path.join(self.run_dir, "logs", f"{role}.torchrun.log")

    def _first_error(self) -> tuple[str, int] | None:
        for role, rank in self.ranks:
            if self.control.get_str(f"error/{role}/{rank}"):
                return role, rank
        return None

    def _own_pid(self, role: str, rank: int) -> int | None:
        """The rank's pid as registered in the store, if that process is (or was, when first
        read) in this controller's tree; a pid that is not ours is reported once and ignored."""
        if (role, rank) in self.own_pids:
            return self.own_pids[(role, rank)]
        text = self.control.get_str(f"pid/{role}/{rank}")
        if not text or text in self._ignored:
            return None
        if text.isdigit() and procs.is_ours(int(text)):
            self.own_pids[(role, rank)] = int(text)
            return int(text)
        if text not in self._ignored:
            self._ignored.add(text)
            print(f"controller: store key pid/{role}/{rank} names pid {text!r}, which this controller "
                  f"did not start: ignored", flush=True)
        return None

    def _dead_pid(self, role: str, rank: int) -> str:
        """The rank's pid if it registered one of ours and that process is gone, else ''."""
        pid = self._own_pid(role, rank)
        return str(pid) if pid and not kernel.pid_alive(pid) else ""

    def _killed_rank(self) -> tuple[str, int] | None:
        """A rank whose process is gone without an error report or a clean exit (SIGKILL, the
        OOM killer): the cause, where its peers' errors ("connection closed") are effects."""
        for role, rank in self.ranks:
            if (self.control.get_str(f"exit/{role}/{rank}") != "0" and self._dead_pid(role, rank)
                    and not self.control.get_str(f"error/{role}/{rank}")):
                return role, rank
        return None

    def _dead_rank(self, role: str) -> tuple[str, int] | None:
        for r, rank in self.ranks:
            clean = self.control.get_str(f"exit/{r}/{rank}") == "0"
            if r == role and not clean and self._dead_pid(r, rank):
                return r, rank
        return None

    def _state(self) -> str:
        return self.control.state()

    def _worker_pids(self) -> list[int]:
        """The ranks' pids known to be ours (procs.stop_all checks them against our tree again)."""
        for role, rank in self.ranks:
            try:
                self._own_pid(role, rank)
            except STORE_ERRORS:
                continue
        return sorted(set(self.own_pids.values()))

    def _sweep_tree(self, children_before: set[int]) -> None:
        """End every process this run started: the agents' trees and every child adopted since
        the run began (orphaned workers, a reward's double-forked processes); never a pid read
        from the store, never a process outside this controller's tree."""
        keep = children_before | {zygote.server_pid()}
        adopted = proc_tree.children_of(os.getpid()) - keep - {p.pid for p in self.procs}
        procs.kill_trees([p.pid for p in self.procs] + sorted(adopted))
        procs.reap_adopted(adopted)

    def _sweep_shm(self) -> None:
        from llamarl_core.transport import shm
        try:
            shm.sweep(self.run_id)
        except Exception:
            pass
