"""Two nodes rehearsed on loopback (recipes/cpu_2node.yaml): `llamarl plan --out` writes the
plan, then `llamarl node … node_rank=K` runs each node as its own process tree, as on a cluster.
Node 0 hosts the controller; node 1 reaches it over TCP."""
import json
import subprocess
import sys
import time
from pathlib import Path

from llamarl_core.rewards.proc_tree import kill_tree
from llamarl_core.transport.control import free_port
from test_runtime import processes_mentioning  # the one /proc scan the runtime tests share

FAST = ["warmstart.steps=2", "algorithm.prompts_per_step=4", "algorithm.group_size=4",
        "algorithm.entropy_coef=0.01",  # every step moves the weights, so versions hash apart
        "data.num_eval_examples=8", "data.num_train_examples=64", "generation.max_new_tokens=8",
        "resources.generator.max_batch_size=64", "resources.trainer.micro_batch_size=16",
        "run.weight_checksums=true", "run.max_time_s=0",
        "controller.startup_timeout_s=90", "controller.heartbeat_timeout_s=10"]
LLAMARL = [sys.executable, "-m", "llamarl_cli.main"]


def write_plan(run_dir: Path, *overrides: str) -> Path:
    out = subprocess.run([*LLAMARL, "plan", "recipe=cpu_2node", "--out", str(run_dir), *FAST,
                          f"controller.role_port_base={free_port('127.0.0.1')}", *overrides],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return run_dir / "plan.json"


def start_node(plan: Path, node_rank: int) -> subprocess.Popen:
    # A session of its own: each node is a separate process tree, as on two hosts.
    return subprocess.Popen([*LLAMARL, "node", f"plan={plan}", f"node_rank={node_rank}"], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def test_node_1_then_node_0_complete_their_steps_with_equal_weight_checksums(tmp_path):
    run_dir = tmp_path / "two"
    plan = write_plan(run_dir, "run.max_steps=3")
    node1 = start_node(plan, 1)  # before the controller exists: it waits for it
    time.sleep(1.0)
    node0 = start_node(plan, 0)
    out0, err0 = node0.communicate(timeout=180)
    out1, err1 = node1.communicate(timeout=60)
    assert node0.returncode == 0, err0[-3000:]
    assert node1.returncode == 0, err1[-3000:]
    steps = [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]
    sums = [json.loads(x) for x in (run_dir / "weight_checksums.jsonl").read_text().splitlines()]
    sent = {s["version"]: s["sha256"] for s in sums if s["role"] == "trainer"}
    got = {s["version"]: s["sha256"] for s in sums if s["role"] == "generator"}
    assert set(got) == {0, 1, 2} and all(got[v] == sent[v] for v in got)  # node 1 → node 0, intact
    assert len(set(sent.values())) == len(sent)  # and the weights really changed each step
    # The plan put the trainer on node 1 and the rest on node 0; each node started its own lines.
    assert (run_dir / "logs" / "trainer.node1.torchrun.log").exists()
    assert (run_dir / "logs" / "generator.node0.torchrun.log").exists()
    assert json.loads(plan.read_text())["config"]["controller"]["weight_transport"] == "auto"
    assert "sync/transport" in (run_dir / "metrics.jsonl").read_text()
    assert json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])["sync/transport"] == "collective"
    assert processes_mentioning(str(run_dir)) == []


def test_killing_node_1_ends_node_0_naming_the_lost_rank_and_leaves_nothing_running(tmp_path):
    # Synchronous: the colocated actor spans both nodes (static rendezvous; rank 1 on node 1).
    run_dir = tmp_path / "killed"
    plan = write_plan(run_dir, "algorithm.max_offpolicy_steps=0", "run.max_steps=100000")
    node0 = start_node(plan, 0)
    node1 = start_node(plan, 1)
    deadline = time.time() + 150
    while time.time() < deadline and not (run_dir / "metrics.jsonl").exists():
        assert node0.poll() is None and node1.poll() is None, "a node ended before the run got going"
        time.sleep(0.2)
    assert (run_dir / "metrics.jsonl").exists(), "the run never got going"
    kill_tree(node1.pid)  # node 1's `llamarl node` and every descendant
    t_kill = time.time()
    node1.wait(timeout=10)
    _, err = node0.communicate(timeout=60)
    assert time.time() - t_kill < 30
    assert node0.returncode == 1
    assert "actor rank 1" in err and "node 1" in err, err[-2000:]
    time.sleep(0.5)
    assert processes_mentioning(str(run_dir)) == []
