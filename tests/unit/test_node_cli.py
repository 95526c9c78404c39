"""`llamarl plan --out`, `llamarl node` and the run id that keeps two runs apart (no training
here: the two-node runs are in tests/dist/test_two_nodes.py)."""
import json
import os
import subprocess
import sys
import time

import pytest

from llamarl_cli.main import main
from llamarl_core.transport.control import (ControllerUnreachable, ControlPlane, RunMismatch, bind_store,
                                            connect_run, free_port, serve_run)

LLAMARL = [sys.executable, "-m", "llamarl_cli.main"]


def write_plan(tmp_path, *overrides):
    run_dir = tmp_path / "run"
    assert main(["plan", "recipe=cpu_2node", "--out", str(run_dir), *overrides]) == 0
    return run_dir / "plan.json"


def test_plan_out_writes_plan_config_controller_address_and_run_id_and_starts_nothing(tmp_path, capsys):
    plan_path = write_plan(tmp_path, "--run-id", "feed1234")
    plan = json.loads(plan_path.read_text())
    assert plan["run_id"] == "feed1234" and plan["nodes"] == 2
    assert plan["controller"]["host"] == "127.0.0.1" and plan["controller"]["port"] > 0  # fixed now
    assert plan["config"]["resources"]["nodes"] == 2 and plan["run_dir"] == str(tmp_path / "run")
    assert {r["name"]: r["nodes"] for r in plan["roles"]} == {"generator": [0], "trainer": [1], "reward": [0]}
    assert f"node_rank=1" in capsys.readouterr().out
    assert sorted(os.listdir(tmp_path / "run")) == ["config.yaml", "logs", "plan.json"]


def test_node_dry_run_prints_its_share_and_node_0_the_controller(tmp_path, capsys):
    plan_path = write_plan(tmp_path)
    capsys.readouterr()
    assert main(["node", f"plan={plan_path}", "node_rank=0", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("controller: TCPStore on 127.0.0.1:") and "role=generator" in out and "role=reward" in out
    assert main(["node", f"plan={plan_path}", "node_rank=1", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "controller" not in out and out.count("torch") == 1 and "role=trainer" in out


@pytest.mark.parametrize("words, message", [
    (["node_rank=2"], "node_rank=2 is outside the plan's 2 node(s)"),
    (["node_rank=x"], "must be an integer"),
    ([], "expected plan=RUN_DIR/plan.json node_rank=K"),
])
def test_bad_node_arguments_exit_2_with_one_line(tmp_path, capsys, words, message):
    plan_path = write_plan(tmp_path)
    assert main(["node", f"plan={plan_path}", *words]) == 2
    assert message in capsys.readouterr().err


def test_train_refuses_a_multi_node_plan_and_names_the_commands_to_use(capsys):
    assert main(["train", "recipe=cpu_2node"]) == 2
    err = capsys.readouterr().err
    assert "this plan has 2 nodes" in err and "llamarl node" in err and "--slurm" in err


def test_store_connect_gives_up_at_the_deadline_naming_the_address():
    port = free_port("127.0.0.1")  # nothing listens there
    t0 = time.monotonic()
    with pytest.raises(ControllerUnreachable, match=f"127.0.0.1:{port} within controller.startup_timeout_s=1.5"):
        connect_run("127.0.0.1", port, "r1", timeout_s=1.5)
    assert 1.5 <= time.monotonic() - t0 < 3.0


def test_every_key_lives_under_the_run_id_and_another_run_is_refused():
    server = bind_store("127.0.0.1", 0)
    ControlPlane(serve_run(server, "aaaa")).mark_done()
    assert server.get("run/aaaa/run/state") == b"done" and not server.check(["run/state"])
    ControlPlane(connect_run("127.0.0.1", server.port, "aaaa", 5)).heartbeat("trainer", 0)
    assert server.check(["run/aaaa/hb/trainer/0"])
    with pytest.raises(RunMismatch, match="serves run aaaa, but this plan.json is for run bbbb"):
        connect_run("127.0.0.1", server.port, "bbbb", 5)


def test_a_node_without_a_controller_fails_within_the_startup_timeout_naming_the_address(tmp_path):
    plan_path = write_plan(tmp_path, "controller.startup_timeout_s=2")
    port = json.loads(plan_path.read_text())["controller"]["port"]
    out = subprocess.run([*LLAMARL, "node", f"plan={plan_path}", "node_rank=1"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 1
    assert f"cannot reach the controller's store at 127.0.0.1:{port} within controller.startup_timeout_s=2" \
        in out.stderr


def test_a_node_and_a_worker_of_another_run_are_refused_before_touching_its_keys(tmp_path):
    server = bind_store("127.0.0.1", 0)
    serve_run(server, "aaaa0000")
    plan_path = write_plan(tmp_path, "--run-id", "bbbb1111")
    plan = json.loads(plan_path.read_text())
    plan["controller"]["port"] = server.port  # same address, another run
    plan_path.write_text(json.dumps(plan))
    out = subprocess.run([*LLAMARL, "node", f"plan={plan_path}", "node_rank=1"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2
    assert "serves run aaaa0000, but this plan.json is for run bbbb1111" in out.stderr
    worker = subprocess.run([sys.executable, "-m", "llamarl_core.runtime.worker", "role=trainer",
                             f"plan={plan_path}"], env={**os.environ, "RANK": "0"}, timeout=60)
    assert worker.returncode == 2
    assert "refusing to join another run" in (tmp_path / "run" / "logs" / "trainer_0.log").read_text()
    assert not server.check(["run/aaaa0000/pid/trainer/0"]) and not server.check(["run/bbbb1111/pid/trainer/0"])
