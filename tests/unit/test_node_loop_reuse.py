"""Node 0 runs the controller's own loop (#46 item 3): `NodeController` overrides only hooks,
so the launch/supervise/sweep code exists once, and it takes a rank's pid from the store only
for a rank on its own node and only if that process is in its tree (like the controller)."""
import os
import subprocess
import sys

import torch.distributed as dist

from llamarl_core.runtime.controller import Controller
from llamarl_core.runtime.node import NodeController
from llamarl_core.transport.control import ControlPlane


def test_node_zero_has_no_loop_of_its_own_only_the_controllers():
    for loop in ("run", "_run", "_supervise", "_watch", "_sweep_tree", "_sweep_shm"):
        assert loop not in NodeController.__dict__, loop
    assert NodeController._run is Controller._run


def _node_controller(store) -> NodeController:
    c = NodeController.__new__(NodeController)
    c.ranks, c.own_pids, c._ignored = [("generator", 0), ("trainer", 0)], {}, set()
    c.local = [("generator", 0)]  # the trainer runs on node 1
    c.control = ControlPlane(store)
    return c


def test_node_zero_stops_only_its_own_ranks_pids_that_are_in_its_tree(capsys):
    store = dist.HashStore()
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        store.set("pid/generator/0", str(os.getppid()))  # a stranger's pid on a local rank
        store.set("pid/trainer/0", str(worker.pid))      # a remote rank: its pid means nothing here
        c = _node_controller(store)
        assert c._worker_pids() == []
        assert c._dead_pid("trainer", 0) == ""
        out = capsys.readouterr().out
        assert "store key pid/generator/0" in out and "trainer" not in out
        store.set("pid/generator/0", str(worker.pid))
        c._ignored.clear()
        assert _node_controller(store)._worker_pids() == [worker.pid]
    finally:
        worker.kill()
        worker.wait()
