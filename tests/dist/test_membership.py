"""Membership epochs on gloo: after a peer is SIGKILLed mid-run, the survivors and a
replacement process build the next epoch's transfer group and exchange data again; a
receive still posted on the dead epoch does not get in the way."""
import os
import signal
import subprocess
import sys
import threading
import time

import torch

from llamarl_core.transport.membership import TransferGroup, current_epoch, next_epoch

CHILD = """
import sys, time, torch, torch.distributed as dist
from llamarl_core.transport.membership import TransferGroup
store = dist.TCPStore("127.0.0.1", int(sys.argv[1]), is_master=False)
g = TransferGroup(store, 0, 2, 3, timeout_s=30)
g.send(torch.tensor([10.0]), 1, 1)
time.sleep(60)  # killed here by its parent
"""


def relay(group: TransferGroup, rank: int) -> float:
    """rank 2 → rank 1 (any source) → rank 0; returns what rank 0 received."""
    buf = torch.zeros(1)
    if rank == 1:
        assert group.recv(buf, None, 1) == 2
        group.send(buf, 0, 2)
    elif rank == 0:
        group.recv(buf, 1, 2)
    return float(buf[0])


def _body(rank, world_size, store):
    got = []
    if rank == 2:  # plays the generator: an old process in epoch 0, itself in epoch 1
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(store.port)])
        store.wait(["got/0"])
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
        assert next_epoch(store) == 1
        group = TransferGroup(store, 1, 2, 3, timeout_s=30)
        group.send(torch.tensor([20.0]), 1, 1)
        return got
    old = TransferGroup(store, 0, rank, 3, timeout_s=30)
    got.append(relay(old, rank))
    if rank == 1:  # a receive still posted on epoch 0 when its sender dies
        threading.Thread(target=lambda: _quietly(old.recv, torch.zeros(1), 2, 1), daemon=True).start()
    if rank == 0:
        store.set("got/0", "1")
    deadline = time.time() + 30
    while current_epoch(store) == 0 and time.time() < deadline:
        time.sleep(0.05)
    assert current_epoch(store) == 1
    got.append(relay(TransferGroup(store, 1, rank, 3, timeout_s=30), rank))
    return got


def _quietly(fn, *args):
    try:
        fn(*args)
    except Exception:
        pass


def test_survivors_and_a_replacement_rebuild_the_transfer_group_after_a_sigkill(run_workers):
    results = run_workers(_body, 3, timeout_s=90)
    assert results[0] == [10.0, 20.0]  # epoch 0 from the killed process, epoch 1 from its replacement
