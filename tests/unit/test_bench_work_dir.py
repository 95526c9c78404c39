"""`llamarl bench` writes its JSON into its work dir (under the current directory, not /tmp)
and removes what it made for itself when it ends: its TMPDIR, checkpoints and, with the
default work dir after a success, the run directories."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from llamarl_cli.main import main
from llamarl_core.bench.work_dir import BenchWorkDir


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """A TMPDIR of the test's own, and the current directory beside it."""
    tmp, cwd = tmp_path / "tmp", tmp_path / "cwd"
    tmp.mkdir()
    cwd.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.chdir(cwd)
    return tmp, cwd


def test_the_simulator_bench_writes_its_json_into_a_work_dir_under_runs_and_leaves_no_temp_files(private_tmp, capsys):
    tmp, cwd = private_tmp
    assert main(["bench", "sync-vs-async", "--simulate"]) == 0
    (work,) = (cwd / "runs" / "bench").iterdir()
    assert work.name.startswith("simulator-")
    assert sorted(p.name for p in work.iterdir()) == ["simulator.json"]
    assert json.loads((work / "simulator.json").read_text())["benchmark"] == "simulator"
    out = capsys.readouterr().out
    assert f"work dir {work}" in out and f"wrote {work / 'simulator.json'}" in out
    assert list(tmp.iterdir()) == []
    assert os.environ["TMPDIR"] == str(tmp)  # the bench's own TMPDIR was only for its time


def _fake_runs(work: Path) -> None:
    """What a sync-vs-async bench leaves in its work dir before cleaning."""
    for run in ("sync_0", "async_0"):
        (work / run / "checkpoints" / "final").mkdir(parents=True)
        (work / run / "checkpoints" / "final" / "model.safetensors").write_bytes(b"x" * 1000)
        (work / run / "logs").mkdir()
        (work / run / "logs" / "trainer_0.log").write_text("log")
        (work / run / "metrics.jsonl").write_text("{}\n")
    (work / "warmstart").mkdir()
    (work / "warmstart" / "model.safetensors").write_bytes(b"x" * 1000)
    (work / "recipe_frozen.yaml").write_text("a: 1\n")
    (work / "sync_vs_async.json").write_text("{}")


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_the_default_work_dir_keeps_only_the_json_and_its_files_after_a_success(private_tmp):
    tmp, cwd = private_tmp
    with BenchWorkDir(None, "sync_vs_async") as wd:
        assert Path(wd.path).parent == cwd / "runs" / "bench"
        assert os.environ["TMPDIR"] == wd.tmp and tempfile.gettempdir() == wd.tmp
        Path(tempfile.mkdtemp(prefix="torchelastic_")).joinpath("x").write_text("y")
        _fake_runs(Path(wd.path))
    assert _tree(Path(wd.path)) == ["recipe_frozen.yaml", "sync_vs_async.json"]
    assert os.environ["TMPDIR"] == str(tmp) and list(tmp.iterdir()) == []


def test_after_a_failure_the_logs_stay_and_the_checkpoints_go(private_tmp):
    with pytest.raises(RuntimeError):
        with BenchWorkDir(None, "sync_vs_async") as wd:
            _fake_runs(Path(wd.path))
            raise RuntimeError("a run failed")
    assert _tree(Path(wd.path)) == ["async_0/logs/trainer_0.log", "async_0/metrics.jsonl", "recipe_frozen.yaml",
                                    "sync_0/logs/trainer_0.log", "sync_0/metrics.jsonl", "sync_vs_async.json"]


def test_an_explicit_work_dir_keeps_each_runs_results_and_what_was_there_before(private_tmp, tmp_path):
    work = tmp_path / "mine"
    (work / "old_run" / "checkpoints").mkdir(parents=True)
    (work / "old_run" / "checkpoints" / "keep.bin").write_text("not the bench's")
    (work / "tmp").mkdir()
    (work / "tmp" / "notes.txt").write_text("the user's own tmp folder")
    with BenchWorkDir(str(work), "sync_vs_async") as wd:
        assert wd.json_path(None) == str(work / "sync_vs_async.json")
        assert wd.json_path("elsewhere.json") == "elsewhere.json"
        _fake_runs(work)
    assert _tree(work) == ["async_0/logs/trainer_0.log", "async_0/metrics.jsonl", "old_run/checkpoints/keep.bin",
                           "recipe_frozen.yaml", "sync_0/logs/trainer_0.log", "sync_0/metrics.jsonl",
                           "sync_vs_async.json", "tmp/notes.txt"]


def test_a_default_work_dir_left_empty_is_removed(private_tmp):
    tmp, cwd = private_tmp
    with BenchWorkDir(None, "weight_sync") as wd:
        wd.failed = True  # e.g. refused its options before measuring anything
    assert not os.path.exists(wd.path) and list((cwd / "runs" / "bench").iterdir()) == []
