"""Resumable checkpoint layout: STABLE decides what may be loaded; pruning; log truncation;
`run.resume` resolution errors. Pure file operations, no processes."""
import json
from pathlib import Path

import pytest

from llamarl_core.checkpoint import checkpoints
from llamarl_core.config.errors import ConfigError
from llamarl_core.config.schema import LlamaRLConfig
from llamarl_core.runtime import resume


def make_checkpoint(run_dir: Path, step: int, stable: bool = True, extra_field: str = "extra") -> Path:
    """`extra_field`: "dropped" is how checkpoints before #46 named the extra chunks."""
    path = run_dir / "checkpoints" / f"step_{step}"
    (path / "trainer").mkdir(parents=True)
    (path / "state.json").write_text(json.dumps({"step": step, "next_chunk": {"0": step + 1},
                                                 extra_field: {"0": 1}}))
    if stable:
        (path / "STABLE").write_text(f"{step}\n")
    return path


def newest(run_dir: Path, monkeypatch) -> str | None:
    """What run.resume=auto picks, every checkpoint's contents taken as valid (layout only)."""
    monkeypatch.setattr(resume, "verify", lambda path: None)
    return resume.newest_valid(str(run_dir), log=None)


def test_a_checkpoint_without_stable_is_never_chosen(tmp_path, monkeypatch):
    make_checkpoint(tmp_path, 5)
    make_checkpoint(tmp_path, 10, stable=False)  # interrupted while writing
    assert newest(tmp_path, monkeypatch) == str(tmp_path / "checkpoints" / "step_5")


def test_no_stable_checkpoint_means_none(tmp_path, monkeypatch):
    make_checkpoint(tmp_path, 5, stable=False)
    assert newest(tmp_path, monkeypatch) is None


def test_steps_sort_numerically_not_as_text(tmp_path, monkeypatch):
    for step in (5, 10, 100, 20):
        make_checkpoint(tmp_path, step)
    assert newest(tmp_path, monkeypatch).endswith("step_100")


def test_prune_keeps_the_newest_stable_ones_and_drops_older_leftovers(tmp_path):
    for step in (5, 10, 15):
        make_checkpoint(tmp_path, step)
    make_checkpoint(tmp_path, 12, stable=False)  # older than the newest kept: a dead leftover
    checkpoints.prune(str(tmp_path), keep=2)
    assert [n for n, _ in checkpoints.step_dirs(str(tmp_path))] == [10, 15]


def test_truncate_keeps_lines_up_to_the_checkpoint_step(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s}) + "\n" for s in range(1, 8)))
    resume.cut_jsonl(str(path), 5)
    assert [json.loads(x)["step"] for x in path.read_text().splitlines()] == [1, 2, 3, 4, 5]


def config(**run) -> LlamaRLConfig:
    cfg = LlamaRLConfig()
    for k, v in run.items():
        setattr(cfg.run, k, v)
    return cfg


@pytest.fixture
def shards_unchecked(monkeypatch):
    """These layout checkpoints hold no shards; what verify refuses is tested in test_trust_files."""
    monkeypatch.setattr(resume, "verify", lambda path: None)


def test_resume_auto_picks_the_newest_stable_checkpoint(tmp_path, shards_unchecked):
    make_checkpoint(tmp_path, 5)
    make_checkpoint(tmp_path, 10, stable=False)
    cfg = config(dir=str(tmp_path), resume="auto", max_steps=30)
    assert resume.resolve(cfg, resume.run_dir_of(cfg)) == str(tmp_path / "checkpoints" / "step_5")


def test_resume_auto_without_a_checkpoint_starts_fresh(tmp_path):
    cfg = config(dir=str(tmp_path), resume="auto")
    assert resume.resolve(cfg, str(tmp_path)) == ""


def test_resume_from_an_unstable_path_is_a_config_error(tmp_path):
    path = make_checkpoint(tmp_path, 10, stable=False)
    cfg = config(resume=str(path))
    assert resume.run_dir_of(cfg) == str(tmp_path)
    with pytest.raises(ConfigError, match="STABLE"):
        resume.resolve(cfg, str(tmp_path))


def test_resume_past_max_steps_is_a_config_error_not_a_silent_zero_step_run(tmp_path, shards_unchecked):
    make_checkpoint(tmp_path, 30)
    cfg = config(dir=str(tmp_path), resume="auto", max_steps=30)
    with pytest.raises(ConfigError, match="run.max_steps=30"):
        resume.resolve(cfg, str(tmp_path))


def test_resume_auto_needs_the_run_directory(tmp_path):
    with pytest.raises(ConfigError, match="run.dir"):
        resume.run_dir_of(config(resume="auto"))


class FakeControl:
    def __init__(self):
        self.keys = {}

    def set_next_chunk(self, replica, chunk):
        self.keys[f"data/next_chunk/{replica}"] = chunk

    def add_extra(self, replica, n):
        self.keys[f"extra/{replica}"] = self.keys.get(f"extra/{replica}", 0) + n


@pytest.mark.parametrize("extra_field", ["extra", "dropped"])
def test_controller_state_is_restored_and_logs_cut_back(tmp_path, extra_field):
    path = make_checkpoint(tmp_path, 5, extra_field=extra_field)
    (tmp_path / "trained_examples.jsonl").write_text(
        "".join(json.dumps({"step": s, "example_ids": [s]}) + "\n" for s in range(1, 8)))
    control = FakeControl()
    resume.restore_controller_state(control, str(tmp_path), str(path))
    assert control.keys == {"data/next_chunk/0": 6, "extra/0": 1}
    assert len((tmp_path / "trained_examples.jsonl").read_text().splitlines()) == 5


def test_a_fresh_start_restores_nothing_and_a_restarted_fresh_run_still_cuts_its_logs(tmp_path):
    control = FakeControl()
    resume.restore_controller_state(control, str(tmp_path), "")  # a new directory
    assert control.keys == {} and list(tmp_path.iterdir()) == []
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{"note": "no step"}\n')
    resume.restore_controller_state(control, str(tmp_path), "")  # logs of a run that saved nothing
    assert control.keys == {} and (tmp_path / "metrics.jsonl").read_text() == '{"note": "no step"}\n'


def test_a_negative_restart_budget_is_refused_naming_the_key():
    from llamarl_core.config.schema import ControllerConfig
    assert ControllerConfig().max_restarts == 3
    with pytest.raises(ConfigError, match="controller.max_restarts"):
        ControllerConfig(max_restarts=-1)
