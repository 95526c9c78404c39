"""Agents forked from the zygote (runtime/zygote.py) behave like the `python -m MODULE ARGS`
processes they replace: the plan's argv on /proc, the env and cwd they were given, their own
session, their log on stdout/stderr, exit codes and signals as Popen reports them, and an end
when the controller goes away. One zygote (one `import torch`) serves the whole module."""
import os
import signal
import subprocess
import sys
import time

import pytest

from llamarl_core.runtime import zygote
from llamarl_core.runtime.procs import pid_alive

PROBE = '''
import os, sys, time
print("argv", sys.argv[1:], "x", os.environ.get("X"), "cwd", os.getcwd(), flush=True)
print("own session", os.getsid(0) == os.getpid(), file=sys.stderr, flush=True)
if sys.argv[1] == "sleep":
    time.sleep(60)
sys.exit(int(sys.argv[2]))
'''


@pytest.fixture(scope="module")
def probe_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("zygote")
    (d / "zygote_probe.py").write_text(PROBE)
    return d


@pytest.fixture(scope="module")
def zyg():
    z = zygote.Zygote()
    yield z
    z.proc.stdin.close()
    z.proc.wait(timeout=30)


def start(zyg, probe_dir, monkeypatch, *args):
    monkeypatch.chdir(probe_dir)
    argv = [sys.executable, "-m", "zygote_probe", *args]
    return zyg.start(argv, {"X": "42", "PATH": os.environ["PATH"]}, str(probe_dir / f"{args[0]}.log")), argv


def cmdline(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return [w.decode() for w in f.read().rstrip(b"\0").split(b"\0")]


def test_an_agent_runs_its_module_with_its_argv_env_cwd_session_and_exit_code(zyg, probe_dir, monkeypatch):
    agent, _ = start(zyg, probe_dir, monkeypatch, "exit", "3")
    assert agent.wait(timeout=30) == 3 and agent.poll() == 3 and agent.returncode == 3
    log = (probe_dir / "exit.log").read_text()
    assert f"argv ['exit', '3'] x 42 cwd {probe_dir}" in log
    assert "own session True" in log  # stderr goes to the same log


def test_the_plans_command_line_is_what_proc_shows_and_sigkill_reads_as_minus_9(zyg, probe_dir, monkeypatch):
    agent, argv = start(zyg, probe_dir, monkeypatch, "sleep", "0")
    deadline = time.time() + 30
    while "argv" not in (probe_dir / "sleep.log").read_text() and time.time() < deadline:
        time.sleep(0.05)
    assert cmdline(agent.pid) == argv  # ps, pkill -f and the tests' /proc scans see the plan's line
    assert agent.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        agent.wait(timeout=0.2)
    os.killpg(agent.pid, signal.SIGKILL)  # its own process group, as stop_all signals it
    assert agent.wait(timeout=10) == -signal.SIGKILL


def test_agents_end_when_the_controller_closes_the_zygote(probe_dir, monkeypatch):
    z = zygote.Zygote()
    agent, _ = start(z, probe_dir, monkeypatch, "sleep", "0")
    z.proc.stdin.close()  # what the controller's exit (or SIGKILL) does to the pipe
    z.proc.wait(timeout=30)
    deadline = time.time() + 10
    while pid_alive(agent.pid) and time.time() < deadline:
        time.sleep(0.05)
    assert not pid_alive(agent.pid) and agent.poll() is not None


def test_only_agent_lines_of_this_interpreter_are_forked(monkeypatch):
    env = dict(os.environ)
    line = [sys.executable, "-m", "llamarl_core.runtime.loopback_torchrun", "--nnodes=1", "-m", "w", "role=r"]
    assert zygote.eligible(line, env)
    assert not zygote.eligible(["env", "CUDA_VISIBLE_DEVICES=0", *line], env)  # a GPU line: exec'd
    assert not zygote.eligible(["/usr/bin/python3", *line[1:]], env)
    assert not zygote.eligible([sys.executable, "-m", "zygote_probe", "x"], env)
    assert not zygote.eligible(line, {**env, "PYTHONPATH": "/elsewhere"})
    monkeypatch.setenv("LLAMARL_ZYGOTE", "0")
    assert not zygote.eligible(line, env)
