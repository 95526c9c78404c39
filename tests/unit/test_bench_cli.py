"""`llamarl bench NAME`: one subcommand per benchmark, listed with a line each; an unknown
name is one line and exit 2; every subcommand's --help works; a module bench's JSON lands in
its work dir with the command as typed."""
from __future__ import annotations

import argparse
import json
import sys
import types

import pytest

from llamarl_cli import bench_cmd
from llamarl_cli.main import main

NAMES = ["sync-vs-async", "quality", "weight-sync", "generation", "generation-real", "launch", "real-model",
         "slots", "streaming", "trainer", "env-busy", "agent", "lora-apply", "lora-trainer", "lora", "losses"]


def test_bench_help_lists_every_benchmark_with_one_line_each(capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", "--help"])
    assert e.value.code == 0
    lines = capsys.readouterr().out.splitlines()[2:]
    assert [line.split()[0] for line in lines] == NAMES
    assert all(len(line.split()) > 3 for line in lines)  # a name and its description


def test_bench_without_a_name_prints_the_list_on_stderr_and_exits_2(capsys):
    assert main(["bench"]) == 2
    err = capsys.readouterr().err
    assert all(name in err for name in NAMES)


def test_an_unknown_benchmark_exits_2_with_one_line_naming_it(capsys):
    assert main(["bench", "bench_streaming", "--out", "x.json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown benchmark 'bench_streaming'" in err[0]


@pytest.mark.parametrize("name", NAMES)
def test_each_subcommand_prints_its_help_and_exits_0(name, capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", name, "--help"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: llamarl bench {name} ")


def test_a_bad_option_of_a_module_bench_exits_2_with_its_usage(capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", "streaming", "--no-such-option"])
    assert e.value.code == 2
    assert "usage: llamarl bench streaming" in capsys.readouterr().err


def test_a_module_bench_writes_its_json_into_its_work_dir_with_the_command(tmp_path, monkeypatch, capsys):
    """A fake bench module: the dispatcher gives it ./runs/bench/<name>-<time>/<name>.json."""
    fake = types.ModuleType("fake_bench")

    def parser(prog):
        p = argparse.ArgumentParser(prog)  # --out and --work-dir: added by `llamarl bench`
        p.add_argument("--rows", type=int)
        return p

    def run(args, command):
        with open(args.out, "w") as f:
            json.dump({"command": command, "rows": args.rows}, f)
        return 0
    fake.parser, fake.run = parser, run
    monkeypatch.setitem(sys.modules, "fake_bench", fake)
    monkeypatch.setitem(bench_cmd.BENCHES, "fake-bench", ("fake_bench", "a fake"))
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "fake-bench", "--rows", "3"]) == 0
    (work,) = (tmp_path / "runs" / "bench").iterdir()
    assert work.name.startswith("fake_bench-") and sorted(p.name for p in work.iterdir()) == ["fake_bench.json"]
    assert json.loads((work / "fake_bench.json").read_text()) == {"command": "llamarl bench fake-bench --rows 3",
                                                                  "rows": 3}
    assert f"wrote {work / 'fake_bench.json'}" in capsys.readouterr().out
    mine = tmp_path / "mine"
    assert main(["bench", "fake-bench", "--work-dir", str(mine)]) == 0
    assert sorted(p.name for p in mine.iterdir()) == ["fake_bench.json"]
