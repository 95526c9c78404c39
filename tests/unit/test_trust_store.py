"""Case 8 of #44: a pid read from the store is never signalled unless this controller started
it. The tests play the hostile local process: they write the pid of a process that is not the
controller's descendant into `pid/<role>/<rank>` and check it survives everything the
controller does to end a run."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import torch.distributed as dist

from llamarl_core.runtime import procs
from llamarl_core.runtime.controller import Controller
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
            from llamarl_core.runtime import procs
            procs.become_subreaper()
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
        from llamarl_core.runtime import procs
        assert procs.become_subreaper()
        before = procs.children_of(os.getpid())
        subprocess.run([sys.executable, "-c",
                        "import os, time\\nif os.fork() == 0:\\n    os.setsid(); time.sleep(60)"], check=True)
        time.sleep(0.3)
        adopted = procs.children_of(os.getpid()) - before
        assert len(adopted) == 1, adopted
        (orphan,) = adopted
        assert procs.kill_trees(sorted(adopted)) == [orphan]
        procs.reap_adopted(adopted)
        assert not procs.pid_alive(orphan)
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
