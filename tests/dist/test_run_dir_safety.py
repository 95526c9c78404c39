"""One real run serves these checks: every socket the run listens on is on the loopback
(the controller's store, each role's torchrun agent, the workers' gloo pairs); its workers
are forked from a copy of their agent (runtime/worker_fork.py); a second run
on its directory is refused naming its pid while it lasts; and `run.resume=auto` on it once
finished (run.checkpoint_every_steps=0: no step checkpoint) is refused, losing nothing.

Before: each role's torchrun agent (`--standalone`) listened on `*`; a second
`run.resume=auto` started in the same directory (metrics interleaved); and resume=auto on the
finished run started a fresh one in place (metrics.jsonl went from 6 lines to 2).
"""
import ipaddress
import os
import socket
import subprocess
import sys
import time

from llamarl_cli.main import main
from llamarl_core.rewards import proc_tree
from test_runtime import FAST

LOOPBACK = {ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")}


def descendants(root: int) -> list[int]:
    return [root, *proc_tree.descendants([root])]


def cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def listening(pids: list[int]) -> list[tuple[int, str, int]]:
    """(pid, address, port) of every TCP socket in LISTEN state that one of `pids` holds."""
    owner = {}
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if target.startswith("socket:["):
                    owner[target[8:-1]] = pid
        except OSError:
            continue
    found = []
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        with open(f"/proc/net/{table}") as f:
            for line in list(f)[1:]:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state != "0A" or inode not in owner:  # 0A = LISTEN
                    continue
                raw, port = bytes.fromhex(local.split(":")[0]), int(local.split(":")[1], 16)
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))  # per-word host order
                found.append((owner[inode], socket.inet_ntop(family, raw), port))
    return found


def test_a_run_listens_on_loopback_only_and_owns_its_directory(tmp_path, capsys):
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "llamarl_cli.main", "train", f"run.dir={run}", "run.resume=auto", *FAST,
           "run.max_steps=20", "run.checkpoint_every_steps=0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lock, deadline = run / "run.lock", time.time() + 150
        while time.time() < deadline and proc.poll() is None:
            if lock.exists() and lock.read_text().strip() == str(proc.pid):
                break  # the controller holds the directory; its roles are still starting
            time.sleep(0.05)
        # A second run on the same directory, while this one lasts.
        assert main(["train", f"run.dir={run}", "run.resume=auto", *FAST]) == 2
        err = capsys.readouterr().err
        assert f"in use by another llamarl run (pid {proc.pid})" in err, err
        sockets = []
        while time.time() < deadline and proc.poll() is None:
            if (run / "metrics.jsonl").exists() and (run / "metrics.jsonl").read_text():
                sockets = listening(descendants(proc.pid))
                break
            time.sleep(0.1)
        assert sockets, "the run never got going"
        # the controller's store, three torchrun agents, gloo pairs of three role groups
        assert len(sockets) >= 7, sockets
        agents = {pid for pid, _, _ in sockets if b"loopback_torchrun" in open(f"/proc/{pid}/cmdline", "rb").read()}
        assert len(agents) == 3, sockets
        assert all(ipaddress.ip_address(addr) in LOOPBACK for _, addr, _ in sockets), sockets
        # Each worker was forked from a copy of its agent made before the agent had threads
        # (runtime/worker_fork.py), not exec'd by the agent: its parent has the agent's command
        # line and is the agent's child; the plan's worker line is what /proc shows.
        workers = [p for p in descendants(proc.pid)
                   if b"llamarl_core.runtime.worker" in cmdline(p).split(b"\0")[1:4]]
        assert len(workers) == 3, workers
        for w in workers:
            copy = parent(w)
            assert b"loopback_torchrun" in cmdline(copy) and cmdline(parent(copy)) == cmdline(copy)
            assert parent(copy) in agents
        out, err = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert f"run.resume=auto: {run} does not exist; starting a fresh run there" in out
    # The finished run has no step checkpoint: resume=auto refuses it and changes nothing.
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 20
    assert main(["train", f"run.dir={run}", "run.resume=auto", *FAST, "run.checkpoint_every_steps=0"]) == 2
    err = capsys.readouterr().err
    assert f"no checkpoint to resume in {run}" in err, err
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
