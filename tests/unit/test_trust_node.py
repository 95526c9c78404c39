"""`llamarl node` trusts nothing in plan.json (#44 case 10): it rebuilds every torchrun line from
the plan's checked fields with the planner's own function, never runs a command string from the
file, and a missing or out-of-range field is one line naming the file and the key (exit 2). Also
the node-heartbeat check node 0 runs every poll (case 13; the killed-node run is in
tests/dist/test_trust_node_lost.py)."""
import json
import shlex

import pytest

from llamarl_cli.main import main
from llamarl_core.runtime import node as node_mod
from llamarl_core.runtime.node import NODE_LOST_AFTER_S, launch_share, share_commands, silent_node
from llamarl_core.runtime.plan_file import load_plan, valid_host


def write_plan(tmp_path, *overrides):
    run_dir = tmp_path / "run"
    assert main(["plan", "recipe=cpu_2node", "--out", str(run_dir), *overrides]) == 0
    return run_dir / "plan.json"


def plant(plan_path, marker):
    """What a hostile local user would do: rewrite every command string in the file."""
    plan = json.loads(plan_path.read_text())
    printed = {r["name"]: list(r["commands"]) for r in plan["roles"]}
    for r in plan["roles"]:
        r["commands"] = [f"touch {marker}; {c}" for c in r["commands"]]
    plan_path.write_text(json.dumps(plan))
    return printed


def test_each_node_rebuilds_exactly_the_commands_the_plan_printed(tmp_path, capsys):
    plan_path = write_plan(tmp_path)
    plan, cfg = load_plan(str(plan_path))
    for node in (0, 1):
        expected = [(r.name, c) for r in plan.roles for c, n in zip(r.commands, r.nodes) if n == node]
        assert share_commands(plan, cfg, node) == expected and expected


def test_a_planted_command_string_is_never_run_and_the_rebuilt_line_is(tmp_path, capsys, monkeypatch):
    plan_path = write_plan(tmp_path)
    marker = tmp_path / "pwned"
    printed = plant(plan_path, marker)
    capsys.readouterr()
    assert main(["node", f"plan={plan_path}", "node_rank=1", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "touch" not in out and out.strip() == f"trainer: {printed['trainer'][0]}"
    started = []  # what the node hands to the process starter (no process is started here)
    monkeypatch.setattr(node_mod.procs, "start_role", lambda cmd, log, env: started.append(cmd) or object())
    plan, cfg = load_plan(str(plan_path))
    for node in (0, 1):
        started.clear()
        launch_share(plan, cfg, node)
        assert started == [c for r in plan.roles for c, n in zip(printed[r.name], r.nodes) if n == node]
        assert all(shlex.split(c)[0] != "touch" and str(marker) not in c for c in started)
    assert not marker.exists()


def edit(plan, key, value):
    """Set (or, with value None, delete) a dotted key such as roles.1.nodes in the plan dict."""
    *path, last = key.split(".")
    for p in path:
        plan = plan[int(p)] if isinstance(plan, list) else plan[p]
    if value is None:
        del plan[last]
    elif isinstance(plan, list):
        plan[int(last)] = value
    else:
        plan[last] = value


@pytest.mark.parametrize("key, value, words", [
    ("nodes", None, ["has no 'nodes'"]),
    ("nodes", 3, ["nodes=3 but its config says resources.nodes=2"]),
    ("nodes", "2", ["nodes='2' must be an integer"]),
    ("roles.1.threads", None, ["has no 'roles[1].threads'"]),
    ("roles.1.nodes", [7], ["roles[1].nodes[0]=7 must be an integer in [0, 1]"]),
    ("roles.1.nodes", [], ["roles[1].nodes=[] must be consecutive node indices"]),
    ("roles.0.num_devices", "1; id", ["roles[0].num_devices='1; id' must be an integer"]),
    ("roles.0.num_devices", 0, ["roles[0].num_devices=0 must be an integer in [1,"]),
    ("roles.0.name", "evil", ["roles[0].name='evil' must be one of generator, trainer, reward, actor"]),
    ("roles.2.name", "generator", ["roles[2].name='generator' must be one of", "each once"]),
    ("roles.0.devices", ["0;id"], ["roles[0].devices[0]='0;id' must be an integer"]),
    ("roles.0.threads", True, ["roles[0].threads=True must be an integer"]),
    ("controller.host", "127.0.0.1 --foo", ["controller.host='127.0.0.1 --foo' is not a hostname or IP"]),
    ("controller.port", 70000, ["controller.port=70000 must be an integer in [1, 65535]"]),
    ("controller", None, ["has no 'controller'"]),
    ("config.resources.hostnames", "-oProxyCommand=x", ["node 0's host '-oProxyCommand=x'",
                                                        "resources.hostnames"]),
    ("run_id", "../../etc", ["run_id='../../etc' must be 1-64 letters"]),
    ("run_dir", "relative/dir", ["run_dir='relative/dir' must be an absolute path"]),
    ("roles", None, ["has no 'roles'"]),
    ("roles", {}, ["roles must be a non-empty list"]),
])
def test_a_plan_field_missing_or_out_of_range_is_one_line_naming_file_and_key_and_starts_nothing(
        tmp_path, capsys, key, value, words):
    plan_path = write_plan(tmp_path)
    plan = json.loads(plan_path.read_text())
    edit(plan, key, value)
    plan_path.write_text(json.dumps(plan))
    capsys.readouterr()
    for node_rank in ("0", "1"):
        assert main(["node", f"plan={plan_path}", f"node_rank={node_rank}"]) == 2
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        assert "Traceback" not in err and len(lines) == 1, err
        assert str(plan_path) in lines[0] and all(w in lines[0] for w in words), lines[0]
    assert sorted(p.name for p in plan_path.parent.iterdir()) == ["config.yaml", "logs", "plan.json"]
    assert list((plan_path.parent / "logs").iterdir()) == []


@pytest.mark.parametrize("host, ok", [
    ("127.0.0.1", True), ("::1", True), ("node-3", True), ("gpu7.cluster.example.org", True),
    ("", False), ("-oProxyCommand=x", False), ("a b", False), ("host;id", False), ("$(id)", False),
    ("a" * 64, False), (7, False),
])
def test_hosts_are_hostnames_or_ip_addresses(host, ok):
    assert valid_host(host) is ok


class FakeStore:
    def __init__(self, values):
        self.values = values

    def get_str(self, key):
        return self.values.get(key, "")


def test_a_node_is_silent_only_once_its_beat_is_older_than_node_lost_after_s():
    now = 1000.0
    fresh, stale = repr(now - NODE_LOST_AFTER_S + 1), repr(now - NODE_LOST_AFTER_S - 2)
    assert silent_node(FakeStore({}), [1, 2], now) is None  # never beat yet: still starting
    assert silent_node(FakeStore({"node/1/hb": fresh, "node/2/hb": fresh}), [1, 2], now) is None
    assert silent_node(FakeStore({"node/1/hb": fresh, "node/2/hb": stale}), [1, 2], now) == \
        (2, pytest.approx(NODE_LOST_AFTER_S + 2))
    assert silent_node(FakeStore({"node/1/hb": "junk"}), [1], now) is None  # not a beat: no crash
