"""TensorBoard event files hold every numeric metrics.jsonl value at its step."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("tensorboard")  # optional third-party package, not ours
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

from llamarl_core.observe.tensorboard_log import TensorBoardLog, scalar_items, tensorboard_tag  # noqa: E402


def test_tags_keep_role_prefixes_and_file_top_level_keys_under_a_group():
    assert tensorboard_tag("trainer/loss") == "trainer/loss"
    assert tensorboard_tag("reward/mean") == "reward/mean"
    assert tensorboard_tag("wall_s") == "time/wall_s"
    assert tensorboard_tag("something_new") == "run/something_new"


def test_only_numbers_become_scalars_and_the_step_is_the_axis():
    line = {"step": 3, "reward/mean": 0.5, "sync/transport": "shm", "flag": True, "sync/bytes": 10}
    assert dict(scalar_items(line)) == {"reward/mean": 0.5, "sync/bytes": 10.0}


def _accumulate(path: str) -> EventAccumulator:
    ea = EventAccumulator(path, size_guidance={"scalars": 0, "histograms": 0, "tensors": 0})
    ea.Reload()
    return ea


def test_event_files_hold_the_metrics_lines_scalars_histograms_and_config(tmp_path):
    (tmp_path / "config.yaml").write_text("run:\n  seed: 7\n")
    log = TensorBoardLog.open(str(tmp_path), enabled=True)
    lines = [{"step": s, "wall_s": 1.5 * s, "reward/mean": 0.1 * s, "trainer/loss": -0.01 * s,
              "sync/transport": "shm"} for s in (1, 2, 3)]
    for line in lines:
        log.write(line, {"trainer/is_ratio": torch.tensor([0.5, 1.0, 2.0 * line["step"]])})
    log.close()
    ea = _accumulate(str(tmp_path / "tb"))
    for key in ("wall_s", "reward/mean", "trainer/loss"):
        events = ea.Scalars(tensorboard_tag(key))
        assert [e.step for e in events] == [1, 2, 3]
        assert [e.value for e in events] == pytest.approx([line[key] for line in lines], rel=1e-6)
    hist = ea.Histograms("trainer/is_ratio")
    assert [h.step for h in hist] == [1, 2, 3]
    assert hist[-1].histogram_value.max == pytest.approx(6.0)
    assert "config/text_summary" in ea.Tags()["tensors"]


def test_turned_off_writes_nothing(tmp_path):
    assert TensorBoardLog.open(str(tmp_path), enabled=False) is None
    assert not (tmp_path / "tb").exists()


def test_a_resumed_run_purges_steps_after_its_checkpoint(tmp_path):
    first = TensorBoardLog.open(str(tmp_path), enabled=True)
    for s in (1, 2, 3, 4):  # steps 3 and 4 were logged after the last checkpoint, then a crash
        first.write({"step": s, "reward/mean": float(s)})
    first.close()
    resumed = TensorBoardLog.open(str(tmp_path), enabled=True, purge_step=3)
    for s in (3, 4):
        resumed.write({"step": s, "reward/mean": 10.0 * s})
    resumed.close()
    events = _accumulate(str(tmp_path / "tb")).Scalars("reward/mean")
    assert [(e.step, e.value) for e in events] == [(1, 1.0), (2, 2.0), (3, 30.0), (4, 40.0)]
