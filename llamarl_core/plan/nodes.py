"""Which host each node is, and what each node of a plan runs.

`resources.hostnames` names the nodes: a template with `{index}` (`node-{index}`), a comma list
in node order (what `scontrol show hostnames` prints, joined), or one name for every node (the
loopback rehearsal, `127.0.0.1`). Pure functions of the config or of a `LaunchPlan`, so
`llamarl node` (which reads plan.json) and the SLURM renderer agree with the printed plan; the
torchrun lines themselves are built in `plan/commands.py`.
"""
from __future__ import annotations

from llamarl_core.config.errors import ConfigError
from llamarl_core.config.schema import LlamaRLConfig


def host_names(hostnames: str, nodes: int) -> list[str]:
    """The host of every node, node 0 first."""
    if "{index}" in hostnames:
        return [hostnames.format(index=i) for i in range(nodes)]
    names = [h.strip() for h in hostnames.split(",") if h.strip()]
    if len(names) == 1:
        return names * nodes
    if len(names) < nodes:
        raise ConfigError(f"resources.hostnames lists {len(names)} hosts but resources.nodes={nodes}")
    return names[:nodes]


def node_host(cfg: LlamaRLConfig, index: int) -> str:
    return host_names(cfg.resources.hostnames, max(cfg.resources.nodes, index + 1))[index]


def ranks_on_node(plan, node_rank: int) -> list[tuple[str, int]]:
    """(role, rank within the role) of every worker node `node_rank` of `plan` (a LaunchPlan)
    starts: a role spanning nodes fills each of them equally (the planner refuses anything else),
    in rank order under static rendezvous."""
    return [(r.name, i) for r in plan.roles for i in range(r.num_devices)
            if r.nodes[i // (r.num_devices // len(r.nodes))] == node_rank]


def address_warnings(cfg: LlamaRLConfig) -> list[str]:
    """A loopback controller that other hosts would have to reach is a mistake worth a line."""
    loopback = ("127.", "localhost", "::1")
    hosts = host_names(cfg.resources.hostnames, cfg.resources.nodes)
    if cfg.resources.nodes > 1 and cfg.controller.host.startswith(loopback) \
            and not all(h.startswith(loopback) for h in hosts[1:]):
        return [f"controller.host={cfg.controller.host} is loopback, but nodes 1.. run on other hosts "
                f"({hosts[1]}, ...): set controller.host to node 0's address ({hosts[0]})"]
    return []
