"""Failures are reported as what happened: a store error is not "aborted", an internal
FileNotFoundError is not "bad input", a name mismatch in a weight copy is not silent, and a
missing plotting extra costs the plots, not the benchmark's JSON."""
import json
import sys

import pytest
from rich.console import Console

from llamarl_cli.bench_cmd import write_with_plots
from llamarl_cli.common import EXIT_USAGE, run_guarded
from llamarl_core.config.errors import ConfigError
from llamarl_core.config.load import load_config
from llamarl_core.runtime.controller import Controller
from llamarl_core.transport.control import ControlPlane


class DeadStore:
    def check(self, keys):
        raise RuntimeError("Connection reset by peer")

    get = set = add = check


def test_a_store_error_in_the_controller_is_reported_as_a_store_error_not_an_abort(tmp_path):
    controller = Controller.__new__(Controller)
    controller.cfg, controller.run_dir, controller.view = load_config("cpu_tiny"), str(tmp_path), None
    controller.ranks, controller.procs, controller.role_of_proc = [("trainer", 0)], [], []
    controller.control = ControlPlane(DeadStore())
    result = controller._supervise()
    assert not result.ok
    assert "store stopped answering" in result.message and "Connection reset by peer" in result.message


def test_only_config_and_usage_errors_are_bad_input():
    def missing_segment():
        raise FileNotFoundError("/dev/shm/llamarl-x-0 vanished")
    with pytest.raises(FileNotFoundError):
        run_guarded(missing_segment)

    def bad_key():
        raise ConfigError("data.path=/nope: not found")
    assert run_guarded(bad_key) == EXIT_USAGE


def test_without_matplotlib_the_bench_json_is_written_and_one_line_names_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    out = tmp_path / "sva.json"
    write_with_plots(str(out), {"speedup": 2.5}, Console(file=open(tmp_path / "console.txt", "w")))
    written = json.loads(out.read_text())
    assert written.pop("commit") and written == {"speedup": 2.5}  # the JSON names its commit
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "llamarl[bench]" in err[0] and "matplotlib" in err[0]
