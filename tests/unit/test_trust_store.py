"""Case 8 of #44: a pid read from the store is never signalled unless this controller started
it. The tests play the hostile local process: they write the pid of a process that is not the
controller's descendant into `pid/<role>/<rank>` and check it survives everything the
controller does to end a run."""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import textwrap
import time

import pytest
import torch.distributed as dist

from llamarl_core.runtime import procs
from llamarl_core.runtime.controller import Controller
from llamarl_core.transport import shm
from llamarl_core.transport.control import ControlPlane

MARK = "llamarl-trust-store-sleeper"


def _stranger() -> subprocess.Popen:
    """A sleeper whose command line mentions the run's plan path, as a hostile one could."""
    return subprocess.Popen([sys.executable, "-c", f"import time; time.sleep(60)  # {MARK} plan=/x/plan.json"])


def _controller(store) -> Controller:
    c = Controller.__new__(Controller)
    c.ranks, c.own_pids, c._ignored = [("reward", 0), ("generator", 0)], {}, set()
    c.control = ControlPlane(store)
    return c


def test_a_store_pid_outside_the_controllers_tree_survives_stop_and_sweep():
    """The 'controller' is a child process; the stranger is its sibling, so not its descendant.
    Before the fix, stop_all SIGKILLed the store's pid and kill_mentioning the plan text."""
    sleeper = _stranger()
    try:
        code = textwrap.dedent(f"""
            from llamarl_core.rewards import proc_tree
            from llamarl_core.runtime import procs
            proc_tree.become_subreaper()
            procs.stop_all([], [{sleeper.pid}], grace_s=0.2)
            assert procs.kill_mentioning("{MARK}") == []
            assert procs.kill_trees([{sleeper.pid}]) == []
        """)
        subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
        time.sleep(0.2)
        assert sleeper.poll() is None, "a pid that the controller did not start was killed"
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_store_pid_that_is_not_a_descendant_is_ignored_with_one_line_naming_the_key(capsys):
    store = dist.HashStore()
    stranger = os.getppid()  # alive, and an ancestor of this process: never ours
    store.set("pid/reward/0", str(stranger))
    store.set("pid/generator/0", "not-a-pid")
    c = _controller(store)
    assert c._worker_pids() == []
    assert c._dead_pid("reward", 0) == ""
    out = capsys.readouterr().out
    assert f"controller: store key pid/reward/0 names pid '{stranger}', which this controller did not start: ignored" in out
    assert "store key pid/generator/0 names pid 'not-a-pid'" in out
    c._worker_pids()
    assert capsys.readouterr().out == ""  # said once, not every poll


def test_a_workers_own_pid_is_remembered_and_a_later_overwrite_is_not_followed():
    store = dist.HashStore()
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        store.set("pid/reward/0", str(worker.pid))
        c = _controller(store)
        assert c._worker_pids() == [worker.pid]
        store.set("pid/reward/0", str(os.getppid()))  # the stranger rewrites the key
        assert c._worker_pids() == [worker.pid]
        worker.kill()
        worker.wait()
        assert c._dead_pid("reward", 0) == str(worker.pid)
    finally:
        worker.kill()
        worker.wait()


def test_kill_trees_ends_an_orphan_adopted_by_the_subreaper():
    """A double-forked sleeper (its parent gone) reparents to a subreaper and is then found
    among its children, so the final sweep ends it; without the subreaper it went to pid 1."""
    code = textwrap.dedent("""
        import os, subprocess, sys, time
        from llamarl_core.rewards import proc_tree
        from llamarl_core.runtime import kernel, procs
        assert proc_tree.become_subreaper()
        before = proc_tree.children_of(os.getpid())
        subprocess.run([sys.executable, "-c",
                        "import os, time\\nif os.fork() == 0:\\n    os.setsid(); time.sleep(60)"], check=True)
        time.sleep(0.3)
        adopted = proc_tree.children_of(os.getpid()) - before
        assert len(adopted) == 1, adopted
        (orphan,) = adopted
        assert procs.kill_trees(sorted(adopted)) == [orphan]
        procs.reap_adopted(adopted)
        assert not kernel.pid_alive(orphan)
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


# ---- case 9: no store value names the file the trainer writes weights into -------------------

def test_slot_names_are_derived_from_run_id_epoch_and_rank_and_a_bad_run_id_is_refused():
    assert shm.slot_paths("ab12", 3, 1, 2) == ["/dev/shm/llamarl-ws-ab12-e3-g1-0", "/dev/shm/llamarl-ws-ab12-e3-g1-1"]
    for bad in ("../etc", "a/b", "", "x" * 65, "a b"):
        with pytest.raises(ValueError, match="run id .* cannot name shared-memory buffers"):
            shm.slot_paths(bad, 0, 0, 1)


def test_a_hostile_slots_key_cannot_point_the_trainer_at_another_file(tmp_path):
    """Before the fix the trainer mapped (and then wrote into) whatever paths `slots/<g>` held."""
    from llamarl_core.transport import ddma_slots
    target = tmp_path / "victim"
    target.write_bytes(b"\0" * 64)
    with pytest.raises(ValueError, match="created b'\\[.*slots, the plan needs 1"):
        ddma_slots._open_slots("shm", json.dumps([str(target)]).encode(), 64, ("trust-x", 0, 0, 1))
    assert target.read_bytes() == b"\0" * 64


@pytest.mark.skipif(not os.access("/dev/shm", os.W_OK), reason="/dev/shm is not writable here")
def test_a_symlink_planted_at_a_slot_name_is_neither_created_through_nor_mapped(tmp_path):
    (path,) = shm.slot_paths(f"trust-{secrets.token_hex(3)}", 0, 0, 1)
    target = tmp_path / "victim"
    target.write_bytes(b"\0" * 64)
    os.symlink(target, path)
    try:
        with pytest.raises(FileExistsError):
            shm.create(path, 64)  # O_EXCL: the generator never writes through it
        with pytest.raises(ValueError, match="not a regular file of this user"):
            shm.open_existing(path, 64)  # the trainer never maps it
        assert target.read_bytes() == b"\0" * 64
    finally:
        os.unlink(path)


def test_a_trainer_and_generator_sync_weights_over_shm_names_both_derive_themselves(tmp_path):
    """One sender and one receiver (a thread) on a HashStore: the store carries only the slot
    count, the weights land, no other file is written and no slot file is left behind."""
    if not os.access("/dev/shm", os.W_OK):
        pytest.skip("/dev/shm is not writable here")
    import threading
    import torch
    from llamarl_core.transport.ddma import DdmaReceiver, DdmaSender
    from llamarl_core.transport.ddma_plan import build_plan
    plan = build_plan({"w": ((4, 4), torch.float32)}, trainer_ranks=1, generator_ranks=1, dtype=torch.float32)
    store, run_id = dist.HashStore(), f"trust-{secrets.token_hex(3)}"
    kw = dict(transport="shm", store=store, epoch=0, timeout_s=30, run_id=run_id)
    target = tmp_path / "victim"
    target.write_bytes(b"\0" * plan.slot_nbytes[0])
    params = {"w": torch.zeros(4, 4)}
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", DdmaReceiver(plan, 0, params, **kw)))
    t.start()
    sender = DdmaSender(plan, 0, **kw)
    t.join(30)
    receiver = out["r"]
    sender.send({"w": torch.full((4, 4), 3.0)}, 1)
    deadline = time.time() + 30
    while receiver.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    assert torch.equal(params["w"], torch.full((4, 4), 3.0))
    assert target.read_bytes() == b"\0" * plan.slot_nbytes[0]
    sender.close()
    receiver.close()
    assert shm.sweep(run_id) == []  # the receiver unlinked its slots after the handshake
