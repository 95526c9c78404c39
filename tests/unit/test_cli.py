"""The CLI: exit codes, one-line errors, --json, --cfg job, --help on every verb."""
import json
import subprocess
import sys

import pytest

from llamarl_cli.main import main


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_json_is_one_object_with_the_contract_fields(capsys):
    code, out, _ = run_cli(capsys, "plan", "recipe=405b_math", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["total_devices"] == 1024
    for r in d["roles"]:
        assert set(r) >= {"name", "num_devices", "ranks", "parallelism", "memory_gib_per_device",
                          "capacity_gib_per_device", "commands"}
        assert set(r["parallelism"]) >= {"tp", "dp", "fsdp", "pp"}
        assert set(r["memory_gib_per_device"]) == {"total", "weights", "gradients", "optimizer",
                                                   "activations", "kv_cache", "reference"}


@pytest.mark.parametrize("argv, words", [
    (["plan", "recipe=405b_math", "resources.trainer.num_devices=8"], ["trainer", "GiB"]),
    (["plan", "resources.trainer.fsdpp=2"], ["resources.trainer.fsdpp"]),
    (["plan", "resources.trainer.tp=abc"], ["resources.trainer.tp"]),
    (["plan", "recipe=nope"], ["unknown recipe"]),
    (["plan", "--bogus"], ["--bogus"]),
    (["plan", "data.path=/nonexistent/x.jsonl"], ["data.path", "not found"]),
])
def test_bad_input_exits_2_with_one_line_and_no_traceback(capsys, argv, words):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    for w in words:
        assert w in err


def test_cfg_job_prints_the_resolved_config(capsys):
    code, out, _ = run_cli(capsys, "plan", "algorithm.rho=3.5", "--cfg", "job")
    assert code == 0 and "rho: 3.5" in out and "resources:" in out


@pytest.mark.parametrize("verb", ["plan", "train", "eval", "data", "bench"])
def test_help_works_on_every_verb(capsys, verb):
    with pytest.raises(SystemExit) as e:
        main([verb, "--help"])
    assert e.value.code == 0
    assert f"llamarl {verb}" in capsys.readouterr().out


def test_console_script_runs_as_a_process():
    out = subprocess.run([sys.executable, "-m", "llamarl_cli.main", "plan", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["recipe"] == "cpu_tiny"


def test_the_controller_of_a_fresh_run_does_not_import_torch_distributed_checkpoint():
    """DCP (with DTensor and sympy) is ~2 s of CPU per `llamarl train`; only a resume needs it
    (runtime/resume.py imports checkpoint/checkpoints.py when it does)."""
    code = ("import sys, llamarl_cli.train_cmd, llamarl_core.runtime.controller; "
            "print('torch.distributed.checkpoint' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stdout + out.stderr[-2000:]
