"""SLURM scripts for the paper-scale recipes (golden files), each node's `llamarl node` line
(the script run with stand-in scontrol/srun/llamarl), and each node's torchrun lines."""
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from llamarl_core.config.load import load_config
from llamarl_core.plan.commands import node_commands, torchrun_argv0
from llamarl_core.plan.nodes import host_names, ranks_on_node
from llamarl_core.plan.plan import make_plan
from llamarl_core.plan.slurm import SHM_PREFIX, render_sbatch
from llamarl_core.transport import shm

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
CASES = {  # recipe: (nodes, data overrides)
    "70b_gsm8k": (32, ["data.path=/data/gsm8k/train.jsonl", "data.eval_path=/data/gsm8k/test.jsonl"]),
    "405b_math": (128, ["data.path=/data/math/train.jsonl", "data.eval_path=/data/math500/test.jsonl"]),
}


@pytest.mark.parametrize("recipe", CASES)
def test_the_batch_script_matches_its_golden_file(recipe):
    nodes, overrides = CASES[recipe]
    assert make_plan(load_config(recipe), require_data=False).nodes == nodes
    text = render_sbatch(recipe, overrides, nodes, 8, "c0ffee00")
    assert text == (GOLDEN / f"{recipe}.sbatch").read_text(), \
        f"regenerate tests/golden/{recipe}.sbatch with render_sbatch if the change is intended"
    assert f"#SBATCH --nodes={nodes}\n#SBATCH --ntasks-per-node=1\n" in text
    assert "--kill-on-bad-exit=1" in text and 'node_%n.log' in text
    assert "scontrol show hostnames" in text


STUBS = {
    "scontrol": 'for i in $(seq 0 $((NODES - 1))); do echo "gpu-$((100 + i))"; done\n',
    # srun: run the command once per node with that node's SLURM_NODEID, as SLURM would.
    "srun": 'while [[ "$1" == --* ]]; do shift; done\n'
            'for i in $(seq 0 $((NODES - 1))); do SLURM_NODEID=$i "$@"; done\n',
    "llamarl": 'printf "%q " "$@" >> "$CALLS"; echo >> "$CALLS"\n',  # each argument exactly
}


@pytest.mark.parametrize("recipe", CASES)
def test_every_node_runs_llamarl_node_with_its_own_rank_and_node_0_hosts_the_controller(recipe, tmp_path):
    nodes, _ = CASES[recipe]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in STUBS.items():
        (bin_dir / name).write_text("#!/bin/bash\n" + body)
        (bin_dir / name).chmod(0o755)
    calls = tmp_path / "calls.txt"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "NODES": str(nodes), "CALLS": str(calls),
           "SLURM_JOB_ID": "77", "SLURM_SUBMIT_DIR": str(tmp_path), "SLURM_JOB_NODELIST": "gpu-[100-x]"}
    out = subprocess.run(["bash", str(GOLDEN / f"{recipe}.sbatch")], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    words, *node_calls = [shlex.split(line) for line in calls.read_text().splitlines()]
    hosts = ",".join(f"gpu-{100 + i}" for i in range(nodes))
    run_dir = tmp_path / "runs" / f"{recipe}-77"
    assert words[:2] == ["plan", f"recipe={recipe}"]
    assert f"resources.hostnames='{hosts}'" in words and "controller.host=gpu-100" in words  # node 0
    assert words[-4:] == ["--out", str(run_dir), "--run-id", "c0ffee00-77"]
    assert node_calls == [["node", f"plan={run_dir}/plan.json", f"node_rank={k}"] for k in range(nodes)]


def test_the_script_cleans_the_file_names_weight_sync_uses():
    assert SHM_PREFIX == shm.PREFIX
    assert shm.slot_paths("ab12-77", 0, 0, 1)[0].startswith(f"/dev/shm/{SHM_PREFIX}-ab12-77-")


def _expected(role, nodes_of_role, node, port, master):
    # Each GPU role's ranks see only the node's 8 GPUs of that role (plan/placement.py).
    argv = ["env", "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7"] + torchrun_argv0() + [f"--nnodes={len(nodes_of_role)}", f"--node-rank={nodes_of_role.index(node)}",
                               f"--master-addr={master}", f"--master-port={port}", "--nproc-per-node=8",
                               "--max-restarts=0", "-m", "llamarl_core.runtime.worker", f"role={role}",
                               "plan=/runs/x/plan.json"]
    return shlex.join(argv)


@pytest.mark.parametrize("recipe, gen_nodes, reward_ranks", [("70b_gsm8k", 16, 2), ("405b_math", 64, 4)])
def test_each_node_starts_exactly_its_torchrun_lines_with_static_rendezvous(recipe, gen_nodes, reward_ranks):
    nodes, _ = CASES[recipe]
    hosts = [f"h{i}" for i in range(nodes)]
    cfg = load_config(recipe, [f"resources.hostnames='{','.join(hosts)}'"])
    plan = make_plan(cfg, run_dir="/runs/x", require_data=False)
    gen, trainer = list(range(gen_nodes)), list(range(gen_nodes, nodes))
    for node in range(nodes):
        expected = []
        if node in gen:
            expected.append(("generator", _expected("generator", gen, node, 29510, "h0")))
        else:
            expected.append(("trainer", _expected("trainer", trainer, node, 29511, f"h{gen_nodes}")))
        if node == 0:
            expected.append(("reward", shlex.join(torchrun_argv0() + [
                "--standalone", "--nnodes=1", f"--nproc-per-node={reward_ranks}", "--max-restarts=0", "-m",
                "llamarl_core.runtime.worker", "role=reward", "plan=/runs/x/plan.json"])))
        assert node_commands(plan, cfg, node, "/runs/x/plan.json") == expected, node
    # Static rendezvous: node k of a role runs that role's ranks 8k..8k+7, never join order.
    assert ranks_on_node(plan, gen_nodes + 3) == [("trainer", r) for r in range(24, 32)]
    assert ranks_on_node(plan, 0)[-1] == ("reward", reward_ranks - 1)


def test_host_names_come_from_a_template_a_list_or_one_name():
    assert host_names("node-{index}", 3) == ["node-0", "node-1", "node-2"]
    assert host_names("a,b,c", 3) == ["a", "b", "c"]
    assert host_names("127.0.0.1", 2) == ["127.0.0.1", "127.0.0.1"]
    with pytest.raises(Exception, match="resources.hostnames lists 2 hosts but resources.nodes=3"):
        host_names("a,b", 3)
