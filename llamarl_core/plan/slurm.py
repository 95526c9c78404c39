"""A SLURM batch script for a plan: `llamarl plan recipe=R --slurm > job.sbatch`.

The script asks SLURM for the plan's nodes (one task each), reads the allocation's host names
(`scontrol show hostnames`; the first is node 0 and hosts the controller), writes the run's
plan.json on node 0 with those hosts and this script's run id, removes /dev/shm leftovers of
the run on every node (a requeued job keeps its run id), and starts `llamarl node` on every
node with `node_rank=$SLURM_NODEID` in one `srun` that ends the step when any node fails.
The run directory must be on a file system every node sees (workers write logs there).
"""
from __future__ import annotations

import shlex

SHM_PREFIX = "llamarl-ws"  # transport/shm.py's file prefix (a layer above plan; tested equal)


def render_sbatch(recipe: str, overrides: list[str], nodes: int, gpus_per_node: int, run_id: str,
                  time_limit: str = "48:00:00") -> str:
    words = " ".join(shlex.quote(w) for w in [f"recipe={recipe}", *overrides])
    gpus = [f"#SBATCH --gpus-per-node={gpus_per_node}"] if gpus_per_node else []
    return "\n".join([
        "#!/bin/bash",
        f"# llamarl: recipe {recipe} on {nodes} node(s); written by `llamarl plan recipe={recipe} --slurm`.",
        "# Submit from the directory holding runs/ (it must be visible on every node), with the",
        "# environment that has `llamarl` activated (srun inherits it): sbatch job.sbatch",
        f"#SBATCH --job-name=llamarl-{recipe}",
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1",
        *gpus,
        "#SBATCH --exclusive",
        f"#SBATCH --time={time_limit}",
        f"#SBATCH --output=llamarl-{recipe}-%j.out",
        "set -euo pipefail",
        "",
        f"RUN_ID={run_id}-${{SLURM_JOB_ID}}",
        f'RUN_DIR="${{LLAMARL_RUN_DIR:-$SLURM_SUBMIT_DIR/runs/{recipe}-$SLURM_JOB_ID}}"',
        'mapfile -t HOSTS < <(scontrol show hostnames "$SLURM_JOB_NODELIST")',
        'HEAD="${HOSTS[0]}"  # node 0: the controller and its TCPStore',
        'HOSTLIST=$(IFS=,; echo "${HOSTS[*]}")',
        'mkdir -p "$RUN_DIR/logs"',
        "",
        "# The plan with this allocation's hosts (quoted: Hydra reads a bare a,b as a sweep); it",
        "# fixes the controller's port (a free one on this host, node 0).",
        f'llamarl plan {words} resources.hostnames="\'$HOSTLIST\'" controller.host="$HEAD" \\',
        '    --out "$RUN_DIR" --run-id "$RUN_ID"',
        "",
        "# Stale shared memory of this run (a requeued job), on every node.",
        f'srun --nodes={nodes} --ntasks-per-node=1 bash -c \'rm -f /dev/shm/{SHM_PREFIX}-"$0"-*\' "$RUN_ID"',
        "",
        "# One `llamarl node` per node; any node failing ends the step. Logs: $RUN_DIR/logs/node_<K>.log",
        f"srun --nodes={nodes} --ntasks-per-node=1 --kill-on-bad-exit=1 \\",
        '    --output="$RUN_DIR/logs/node_%n.log" \\',
        '    bash -c \'exec llamarl node plan="$0/plan.json" node_rank="$SLURM_NODEID"\' "$RUN_DIR"',
        "",
    ])
