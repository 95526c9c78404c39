"""Where each accelerator role runs: its nodes and, on each node, its local GPU indices.

Roles are packed in plan order (generators, then the trainer) onto consecutive device slots:
a role that fits in what is left of a node shares that node (8 x H100: generators on GPUs
0-3, trainer on 4-7); a role larger than a node starts on a node boundary and fills whole
nodes. Each rank later sees only its role's GPUs (CUDA_VISIBLE_DEVICES in its command), so
it uses `cuda:<LOCAL_RANK>`. With `resources.share_devices` the trainer sits on the
generator's GPU. Reward ranks use no accelerator and run on node 0.

On CPU there are no device indices (`devices` stays empty, so commands get no
CUDA_VISIBLE_DEVICES): one node holds every role, or with `resources.nodes > 1` each role
starts on a node of its own (the multi-node rehearsal on loopback hosts, plan/nodes.py).
"""
from __future__ import annotations

from llamarl_core.config.errors import ConfigError
from llamarl_core.config.hardware import DeviceSpec
from llamarl_core.config.schema import LlamaRLConfig


def accelerators(cfg: LlamaRLConfig, compute_ranks: int) -> int:
    """GPUs the roles occupy (ranks, unless generator and trainer share one)."""
    return 1 if cfg.resources.share_devices else compute_ranks


def place_roles(cfg: LlamaRLConfig, spec: DeviceSpec, roles: list, compute_ranks: int) -> int:
    """Set `nodes` and `devices` on every role; returns the number of nodes."""
    res = cfg.resources
    per_node = res.devices_per_node or spec.devices_per_node
    if not spec.is_gpu and res.nodes == 1:
        for r in roles:
            r.nodes, r.devices = [0], []
        return 1
    for key, tp in (("resources.generator.tp", res.generator.tp), ("resources.trainer.tp", res.trainer.tp)):
        if tp > per_node:
            raise ConfigError(f"{key}={tp} exceeds devices_per_node={per_node}: tensor parallelism "
                              f"must stay inside a node's NVLink domain")
    needed, capacity = accelerators(cfg, compute_ranks), res.nodes * per_node
    if needed > capacity:
        raise ConfigError(f"roles need {needed} devices but resources.nodes={res.nodes} x "
                          f"devices_per_node={per_node} = {capacity}")
    slot, used = 0, []
    for r in roles:
        if not r.uses_accelerator:
            r.nodes, r.devices = [0], []
            continue
        if res.share_devices and r.name == "trainer":  # on the generator's GPU
            r.nodes, r.devices = [0], [0]
            continue
        if r.num_devices > per_node:
            if r.num_devices % per_node:
                raise ConfigError(f"{r.name}: {r.num_devices} devices span nodes but are not a multiple "
                                  f"of resources.devices_per_node={per_node}")
            slot = -(-slot // per_node) * per_node  # start on a node boundary
        elif not spec.is_gpu or slot % per_node + r.num_devices > per_node:
            # CPU roles each take nodes of their own; a GPU role that does not fit in what
            # is left of this node starts the next one
            slot = -(-slot // per_node) * per_node
        first, slot = slot, slot + r.num_devices
        r.nodes = list(range(first // per_node, (slot - 1) // per_node + 1))
        r.devices = list(range(first % per_node, first % per_node + min(r.num_devices, per_node))) \
            if spec.is_gpu else []
        used.append(f"{r.name} {len(r.nodes)}")
    nodes_used = -(-slot // per_node)
    if nodes_used > res.nodes:
        raise ConfigError(f"roles need {nodes_used} nodes ({', '.join(used)}) but resources.nodes={res.nodes}")
    return res.nodes
