"""Two nodes on loopback (recipes/cpu_2node.yaml), node 1 (the trainer's node) killed whole: node
0's controller must notice from node 1's silent heartbeat within NODE_LOST_AFTER_S + a few
seconds (#44 case 13: with a streaming generator nothing else on node 0 fails, and the run went
on generating for controller.heartbeat_timeout_s). The plan's command strings are planted with
`touch MARKER; ...` first: both nodes run the lines they rebuild, never the file's (case 10)."""
import json
import time

from llamarl_core.rewards.proc_tree import kill_tree
from llamarl_core.runtime.node import NODE_LOST_AFTER_S
from test_runtime import processes_mentioning
from test_two_nodes import start_node, write_plan


def test_killing_node_1_whole_ends_node_0_on_its_silent_heartbeat_naming_node_and_roles(tmp_path):
    run_dir = tmp_path / "lost"
    # heartbeat_timeout_s far above the bound: only the node heartbeat can end the run in time.
    plan = write_plan(run_dir, "run.max_steps=100000", "controller.heartbeat_timeout_s=300")
    marker = tmp_path / "pwned"
    doc = json.loads(plan.read_text())
    for r in doc["roles"]:
        r["commands"] = [f"touch {marker}; {c}" for c in r["commands"]]
    plan.write_text(json.dumps(doc))
    node0, node1 = start_node(plan, 0), start_node(plan, 1)
    try:
        deadline = time.time() + 180
        while time.time() < deadline and not (run_dir / "metrics.jsonl").exists():
            assert node0.poll() is None and node1.poll() is None, "a node ended before the run got going"
            time.sleep(0.2)
        assert (run_dir / "metrics.jsonl").exists(), "the run never got going"
        assert not marker.exists()  # the nodes ran their rebuilt lines, and the run trains
        kill_tree(node1.pid)  # node 1's `llamarl node` and every descendant
        t_kill = time.time()
        node1.wait(timeout=10)
        _, err = node0.communicate(timeout=NODE_LOST_AFTER_S + 60)
        took_s = time.time() - t_kill
    finally:
        for p in (node0, node1):
            if p.poll() is None:
                kill_tree(p.pid)
    assert node0.returncode == 1, err[-2000:]
    assert "node 1 (roles: trainer) stopped sending heartbeats" in err, err[-2000:]
    assert f"(NODE_LOST_AFTER_S={NODE_LOST_AFTER_S:g}): the run is stopped" in err, err[-2000:]
    assert took_s < NODE_LOST_AFTER_S + 15, took_s
    time.sleep(0.5)
    assert processes_mentioning(str(run_dir)) == []
    assert not marker.exists()
