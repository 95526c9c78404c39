"""One node's share of a plan: `llamarl node plan=<run_dir>/plan.json node_rank=K`.

    node 0   NodeController: the controller's TCPStore on the plan's address (controller.host,
             port fixed when the plan was written), keys under the run id; node 0's torchrun
             lines; supervises every rank of every node (heartbeats, error keys, startup)
    node K   NodeAgent: reaches that store within controller.startup_timeout_s (naming the
             address when it cannot), execs node K's torchrun lines, reports a local rank that
             dies by role and rank, and stops its processes when the run ends or the
             controller goes away

Pids are only checked on the node that owns them (a pid means nothing on another host); a
node whose whole process tree vanished is found by its loop's silent beat (`node/<K>/hb`),
which node 0 reads on every poll of its supervision loop (`silent_node`). Each node rebuilds its
torchrun lines from plan.json's checked fields (`runtime/plan_file.py`), never runs its strings.
"""
from __future__ import annotations

import os
import signal
import threading
import time

from llamarl_core.config.errors import ConfigError
from llamarl_core.config.schema import LlamaRLConfig
from llamarl_core.plan.commands import node_commands
from llamarl_core.plan.nodes import node_host, ranks_on_node
from llamarl_core.plan.plan import LaunchPlan
from llamarl_core.runtime import procs
from llamarl_core.runtime.controller import DONE_GRACE_S, POLL_S, STORE_ERRORS, Controller, RunResult, _raise_interrupt
from llamarl_core.transport import shm
from llamarl_core.transport.control import ControlPlane, bind_store, connect_run

NODE_EXIT_WAIT_S = 10.0     # how long node 0 keeps the store up for other nodes to stop cleanly
NODE_LOST_AFTER_S = 10.0    # a node loop silent this long is gone (it beats every POLL_S; the
                            # margin is for a loaded host, where a loop can stall for seconds)


PLAN_FILES = {"plan.json", "config.yaml", "logs", "run.lock"}  # what `plan --out` and a launch make


def check_outputs(run_dir: str, cfg: LlamaRLConfig) -> None:
    """A plan for a fresh run never starts in a directory that already holds a run's outputs
    (a finished run's node 0 started again would write over its metrics and checkpoints)."""
    if cfg.run.resume:
        return
    found = sorted(set(os.listdir(run_dir)) - PLAN_FILES)
    if found:
        raise ConfigError(f"{run_dir} already holds a run ({', '.join(found[:4])}); its plan is for a "
                          f"fresh run: write a new one with `llamarl plan ... --out NEW_DIR`, or "
                          f"`llamarl plan ... run.resume=auto --out {run_dir}` to continue it")


def share_commands(plan: LaunchPlan, cfg: LlamaRLConfig, node_rank: int) -> list[tuple[str, str]]:
    """Node `node_rank`'s torchrun lines, rebuilt from the plan's checked fields (plan_file.py)."""
    return node_commands(plan, cfg, node_rank, os.path.join(plan.run_dir, "plan.json"))


def launch_share(plan: LaunchPlan, cfg: LlamaRLConfig, node_rank: int) -> tuple[list, list[str]]:
    """Exec node `node_rank`'s torchrun lines, the ones the plan printed, rebuilt (never read)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    started, names = [], []
    for role, cmd in share_commands(plan, cfg, node_rank):
        log = os.path.join(plan.run_dir, "logs", f"{role}.node{node_rank}.torchrun.log")
        started.append(procs.start_role(cmd, log, {**env, "OMP_NUM_THREADS": str(plan.role(role).threads)}))
        names.append(role)
    return started, names


def _local_pids(control: ControlPlane, local: list[tuple[str, int]]) -> list[int]:
    pids = []
    for role, rank in local:
        try:
            pid = control.get_str(f"pid/{role}/{rank}")
        except Exception:
            continue
        if pid:
            pids.append(int(pid))
    return pids


def silent_node(control: ControlPlane, nodes, now_s: float | None = None) -> tuple[int, float] | None:
    """(node, seconds silent) of the first node whose loop beat once and then stopped for more
    than NODE_LOST_AFTER_S; a node that has not beaten yet is still starting (the ranks' own
    startup timeout covers it)."""
    now_s = time.time() if now_s is None else now_s
    for node in nodes:
        try:
            beat_s = float(control.get_str(f"node/{node}/hb") or "nan")
        except ValueError:
            continue  # not a beat (a stranger's write): the ranks' own heartbeats still count
        if now_s - beat_s > NODE_LOST_AFTER_S:
            return node, now_s - beat_s
    return None


class NodeController(Controller):
    """Node 0: the controller, plus node 0's torchrun groups."""

    def __init__(self, plan: LaunchPlan, cfg: LlamaRLConfig, view=None):
        super().__init__(cfg, plan, plan.run_dir, view)
        self.local = ranks_on_node(plan, 0)
        self.node_of = {who: n for n in range(plan.nodes) for who in ranks_on_node(plan, n)}
        self.roles_of_node = {n: sorted({role for role, _ in ranks_on_node(plan, n)}) for n in range(1, plan.nodes)}
        self.lost_node: int | None = None

    WHO, WHERE = "node 0", " on node 0"

    # Controller._run is the loop (Controller.run holds the run directory's lock around it);
    # node 0 differs in where its store listens, which lines it launches, and waiting for the
    # other nodes before the sweep. The sweep is the controller's: only this process's tree
    # (it is a child subreaper), so on a loopback rehearsal node 1's processes are never hit.
    def _open_store(self):
        check_outputs(self.run_dir, self.cfg)
        host, port = self.plan.controller.host, self.plan.controller.port
        try:
            store = bind_store(host, port)
        except (RuntimeError, OSError) as e:
            raise ConfigError(f"node 0 cannot listen on the plan's controller address {host}:{port} "
                              f"(controller.host / controller.port): {e}") from None
        shm.sweep(self.plan.run_id)  # a crashed earlier try's buffers
        return store, self.plan.run_id

    def _launch(self) -> None:
        self.procs, self.role_of_proc = launch_share(self.plan, self.cfg, 0)

    def _before_sweep(self, ok: bool) -> None:
        self._wait_for_nodes(DONE_GRACE_S if ok else NODE_EXIT_WAIT_S)

    def _torchrun_log(self, role: str) -> str:
        return os.path.join(self.run_dir, "logs", f"{role}.node0.torchrun.log")

    # Pids are checked where they live (and only if in this tree); other nodes report their own.
    def _own_pid(self, role: str, rank: int) -> int | None:
        return super()._own_pid(role, rank) if (role, rank) in self.local else None

    def _find_problem(self, elapsed: float, c) -> tuple | None:
        """Node heartbeats every poll, not only after something failed: a streaming generator on
        node 0 keeps going when node 1's trainer vanishes, so nothing else would fail before
        controller.heartbeat_timeout_s (a 2-minute silent run on the rehearsal)."""
        lost = silent_node(self.control, self.roles_of_node)
        if lost is not None:
            node, silent_s = lost
            role, rank = next(who for who, n in self.node_of.items() if n == node)
            self.lost_node = node
            return (f"node {node} (roles: {', '.join(self.roles_of_node[node])}) stopped sending heartbeats "
                    f"{silent_s:.0f} s ago (NODE_LOST_AFTER_S={NODE_LOST_AFTER_S:g}): the run is stopped",
                    role, rank)
        return super()._find_problem(elapsed, c)

    def _failure(self, message: str, role: str | None = None, rank: int | None = None) -> RunResult:
        """A rank whose node vanished shows up first as its peers' broken connections: name it."""
        if self.lost_node is not None:  # the message already names the node and its roles
            return super()._failure(message, role, rank)
        lost = self._lost_remote_rank()
        if lost is not None:
            (role, rank), why = lost
            node = self.node_of[(role, rank)]
            message = (f"role {role} rank {rank} on node {node} ({node_host(self.cfg, node)}) was lost: "
                       f"{why} (then: {message})")
        return super()._failure(message, role, rank)

    def _lost_remote_rank(self):
        """Wait (a few seconds at most) until every other node's rank has an exit code, its node
        reported its process dead (`lost/`), or its node stopped beating (`node/<K>/hb`, set by the
        node's own loop: rank heartbeats report progress, and a busy rank is not a lost one)."""
        deadline = time.time() + NODE_LOST_AFTER_S + 2.0
        while True:
            pending = False
            for role, rank in self.ranks:
                if (role, rank) in self.local or self.control.get_str(f"exit/{role}/{rank}"):
                    continue
                node = self.node_of[(role, rank)]
                if self.control.get_str(f"lost/{role}/{rank}"):
                    return (role, rank), f"its process died (reported by node {node})"
                silent = silent_node(self.control, [node])
                if silent is not None:
                    return (role, rank), (f"node {node} stopped answering {silent[1]:.1f} s "
                                          f"ago and the rank left no exit code")
                pending = True
            if not pending or time.time() > deadline:
                return None
            time.sleep(0.2)

    def _wait_for_nodes(self, limit_s: float) -> None:
        """Keep the store up until every live node has stopped its processes (or `limit_s`)."""
        deadline = time.time() + limit_s
        try:
            for node in range(1, self.plan.nodes):
                while time.time() < deadline and not self.control.get_str(f"node/{node}/exit"):
                    if not self.control.get_str(f"node/{node}/hb") or silent_node(self.control, [node]):
                        break  # that node is gone (or never came)
                    time.sleep(POLL_S)
        except STORE_ERRORS:
            pass


class NodeAgent:
    """Node K > 0: its torchrun groups, watched locally; the controller decides the run."""

    def __init__(self, plan: LaunchPlan, cfg: LlamaRLConfig, node_rank: int, log=print):
        self.plan, self.cfg, self.node_rank, self.log = plan, cfg, node_rank, log
        self.local = ranks_on_node(plan, node_rank)
        self.procs: list = []

    def run(self) -> RunResult:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _raise_interrupt)
        c, addr, run_id = self.cfg.controller, self.plan.controller, self.plan.run_id
        # Raises ControllerUnreachable (naming host:port) or RunMismatch before anything starts.
        self.control = ControlPlane(connect_run(addr.host, addr.port, run_id, c.startup_timeout_s))
        self.log(f"node {self.node_rank}: joined run {run_id} at {addr.host}:{addr.port}")
        shm.sweep(run_id)
        names: list[str] = []
        try:
            self.procs, names = launch_share(self.plan, self.cfg, self.node_rank)
            result = self._watch(names)
        except KeyboardInterrupt:
            reason = f"interrupted (Ctrl-C or SIGTERM) on node {self.node_rank}"
            self._quietly(lambda: self.control.abort(reason))
            result = RunResult(False, self.plan.run_dir, reason)
        finally:
            pids = self._quietly(lambda: _local_pids(self.control, self.local)) or []
            procs.stop_all(self.procs, pids, grace_s=5.0)
            shm.sweep(self.plan.run_id)
            self._quietly(lambda: self.control.store.set(f"node/{self.node_rank}/exit", "1"))
        return result

    def _watch(self, names: list[str]) -> RunResult:
        run_dir, addr = self.plan.run_dir, self.plan.controller
        unreachable_since, done_at = None, None
        while True:
            try:
                self.control.store.set(f"node/{self.node_rank}/hb", repr(time.time()))
                state = self.control.state()
                unreachable_since = None
            except Exception:
                unreachable_since = unreachable_since or time.time()
                if time.time() - unreachable_since > 3.0:
                    return RunResult(False, run_dir, f"node {self.node_rank}: lost the controller at "
                                     f"{addr.host}:{addr.port}")
                time.sleep(POLL_S)
                continue
            if state == "aborted":
                return RunResult(False, run_dir, self.control.abort_reason() or "the run was aborted")
            if state == "done":
                done_at = done_at or time.time()
                if all(p.poll() is not None for p in self.procs) or time.time() - done_at > DONE_GRACE_S:
                    return RunResult(True, run_dir, "done")
            else:
                problem = self._local_problem(names)
                if problem:
                    message, role, rank = problem
                    if not self.control.get_str(f"error/{role}/{rank}"):
                        self.control.store.set(f"error/{role}/{rank}", message)
                    self.control.store.set(f"lost/{role}/{rank}", message)
                    self.control.abort(message)
                    return RunResult(False, run_dir, message, (role, rank))
            time.sleep(POLL_S)

    def _local_problem(self, names: list[str]):
        where = f"on node {self.node_rank}"
        for role, rank in self.local:
            if self.control.get_str(f"exit/{role}/{rank}") == "0":
                continue
            pid = self.control.get_str(f"pid/{role}/{rank}")
            if pid and not procs.pid_alive(int(pid)):
                err = self.control.get_str(f"error/{role}/{rank}")
                message = f"role {role} rank {rank} (pid {pid}) {where} died" + (f": {err}" if err else "")
                return message, role, rank
        for name, p in zip(names, self.procs):
            code = p.poll()
            if code is not None and code != 0:
                rank = next((i for r, i in self.local if r == name), 0)
                return f"role {name} {where}: its torchrun exited with code {code}", name, rank
        return None

    @staticmethod
    def _quietly(fn):
        try:
            return fn()
        except Exception:
            return None
