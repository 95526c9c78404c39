"""The torchrun command line(s) for one role: one per node (`llamarl node` rebuilds its node's).

Each role is its own torchrun world. On a single-host plan every role runs through
`runtime/loopback_torchrun.py`: torchrun with static rendezvous on 127.0.0.1 and a free port
it binds itself, so no socket of the run listens beyond the loopback and a busy port is never
fatal. On a multi-node plan a role on one node uses `--standalone`, and a multi-node role
static rendezvous (torchrun's default backend) on the role's first node, so every worker's
RANK follows from `--node-rank` (c10d would number ranks in join order and ignore it).
Workers find the controller's TCPStore through plan.json, so the lines do not depend on its port.
"""
from __future__ import annotations

import os
import shlex
import shutil
import sys

from llamarl_core.config.schema import LlamaRLConfig
from llamarl_core.config.errors import ConfigError
from llamarl_core.plan.nodes import node_host

WORKER_MODULE = "llamarl_core.runtime.worker"
LOOPBACK_TORCHRUN = "llamarl_core.runtime.loopback_torchrun"


def loopback_torchrun_argv() -> list[str]:
    """torchrun with its rendezvous on 127.0.0.1 (it binds a free port itself)."""
    return [sys.executable, "-m", LOOPBACK_TORCHRUN, "--rdzv-backend=static", "--master-addr=127.0.0.1",
            "--nnodes=1"]


def torchrun_argv0() -> list[str]:
    """torchrun of this interpreter's environment (works without an activated venv)."""
    beside = os.path.join(os.path.dirname(sys.executable), "torchrun")
    if os.path.exists(beside):
        return [beside]
    found = shutil.which("torchrun")
    return [found] if found else [sys.executable, "-m", "torch.distributed.run"]


def role_argv(cfg: LlamaRLConfig, role: str, num_ranks: int, nodes: list[int], plan_path: str,
              role_index: int, node_rank: int = 0, devices: list[int] | None = None) -> list[str]:
    per_node = num_ranks // len(nodes)  # a role spanning nodes fills each (plan/placement.py)
    # A GPU role sees only its own GPUs, so each rank's device is cuda:<LOCAL_RANK>.
    argv = ["env", "CUDA_VISIBLE_DEVICES=" + ",".join(map(str, devices))] if devices else []
    if cfg.resources.nodes == 1:
        argv += loopback_torchrun_argv()
    elif len(nodes) == 1:
        argv += torchrun_argv0() + ["--standalone", "--nnodes=1"]
    else:
        argv += torchrun_argv0()
        host = node_host(cfg, nodes[0])  # static rendezvous: RANK = node rank x per-node + local rank
        argv += [f"--nnodes={len(nodes)}", f"--node-rank={node_rank}", f"--master-addr={host}",
                 f"--master-port={cfg.controller.role_port_base + role_index}"]
    argv += [f"--nproc-per-node={per_node}", "--max-restarts=0", "-m", WORKER_MODULE,
             f"role={role}", f"plan={plan_path}"]
    return argv


def role_commands(cfg: LlamaRLConfig, role: str, num_ranks: int, nodes: list[int], plan_path: str,
                  role_index: int, devices: list[int] | None = None) -> list[str]:
    return [shlex.join(role_argv(cfg, role, num_ranks, nodes, plan_path, role_index, i, devices))
            for i in range(len(nodes))]


def node_commands(plan, cfg: LlamaRLConfig, node_rank: int, plan_path: str) -> list[tuple[str, str]]:
    """(role, torchrun command line) node `node_rank` execs, in plan order: rebuilt from the
    plan's role fields and config by `role_commands`, never read from its `commands` strings."""
    if not 0 <= node_rank < plan.nodes:
        raise ConfigError(f"node_rank={node_rank} is outside the plan's {plan.nodes} node(s) "
                          f"(0..{plan.nodes - 1})")
    return [(r.name, cmd) for i, r in enumerate(plan.roles)
            for cmd, node in zip(role_commands(cfg, r.name, r.num_devices, r.nodes, plan_path, i, r.devices), r.nodes)
            if node == node_rank]
