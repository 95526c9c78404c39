"""torchrun for a role of a single-host plan, with every socket of the role on the loopback.

    python -m llamarl_core.runtime.loopback_torchrun --rdzv-backend=static --master-addr=127.0.0.1 \
        --nnodes=1 --nproc-per-node=N --max-restarts=0 -m llamarl_core.runtime.worker role=R plan=P

torchrun's rendezvous store is a TCPStore, and a TCPStore server listens on every interface
whatever address it is given (`--standalone` left six unauthenticated ports on `*` per run).
So this binds a socket to 127.0.0.1 on a free port first, hands it to a TCPStore server kept
in this process (multi_tenant: torchrun's static rendezvous, asked for the same port, reuses
that server instead of opening its own), and runs torchrun with `--master-port=<that port>`.
The workers inherit GLOO_SOCKET_IFNAME=lo and NCCL_SOCKET_IFNAME=lo (unless set), so their
gloo pairs and NCCL bootstrap sockets listen on the loopback too; the controller's own store
binds `controller.host` (transport/control.py). Multi-node plans use plain torchrun with
static rendezvous on the plan's hosts (plan/commands.py).
"""
from __future__ import annotations

import os
import socket
import sys
from datetime import timedelta

LOOPBACK = "127.0.0.1"


def bind_rendezvous_store():
    """A TCPStore server listening on the loopback only; returns (store, port)."""
    import torch.distributed as dist

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((LOOPBACK, 0))
        sock.listen(128)
        port = sock.getsockname()[1]
        store = dist.TCPStore(LOOPBACK, port, is_master=True, wait_for_workers=False, multi_tenant=True,
                              timeout=timedelta(seconds=600), master_listen_fd=sock.fileno())
    except BaseException:
        sock.close()
        raise
    sock.detach()  # the store owns the listening descriptor now
    return store, port


def main(argv: list[str]) -> None:
    for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        os.environ.setdefault(name, "lo")
    from llamarl_core.runtime import worker_fork

    forked = worker_fork.fork_worker_zygote()  # first: no thread of this process runs yet
    if forked is not None:
        worker_fork.install(forked)
    store, port = bind_rendezvous_store()  # noqa: F841 (kept alive for torchrun's lifetime)
    from torch.distributed.run import main as torchrun

    torchrun([f"--master-port={port}", *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
