"""What a finished run leaves for people: TensorBoard events equal to metrics.jsonl, samples
from every held-out eval, and `llamarl report` pictures."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("tensorboard")  # optional third-party package
pytest.importorskip("matplotlib")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

from llamarl_core.observe.tensorboard_log import tensorboard_tag  # noqa: E402


@pytest.fixture
def finished_run(async_run):
    """conftest's async run: 4 steps, a held-out eval every 2 with 3 samples, TensorBoard on."""
    return async_run


def test_event_files_hold_every_scalar_of_metrics_jsonl(finished_run):
    lines = [json.loads(x) for x in (finished_run / "metrics.jsonl").read_text().splitlines()]
    ea = EventAccumulator(str(finished_run / "tb"), size_guidance={"scalars": 0, "histograms": 0})
    ea.Reload()
    # these are in every line; entropy and loss only on steps that trained a row (a step where
    # every group scored alike trains none: this short run's rewards are mostly 0)
    always = ("reward/mean", "reward/std", "trainer/is_ratio_max", "trainer/mismatch_kl",
              "trainer/tokens_per_s", "generator/truncated_frac", "sync/seconds", "trainer/step_s",
              "trainer/tokens_total", "generator/dropped_chunks",
              "trainer/busy_frac", "trainer/staleness_max")
    assert all(key in m for m in lines for key in always)
    numeric = {k for m in lines for k, v in m.items()
               if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}
    for key in sorted(numeric):
        expected = [(m["step"], m[key]) for m in lines if key in m]
        got = [(e.step, e.value) for e in ea.Scalars(tensorboard_tag(key))]
        assert [s for s, _ in got] == [s for s, _ in expected], key
        assert [v for _, v in got] == pytest.approx([v for _, v in expected], rel=1e-5, abs=1e-6), key
    trained = [m["step"] for m in lines if m["trainer/trained_rows_frac"] > 0]  # ratios only where tokens trained
    has_ratios = "trainer/is_ratio" in ea.Tags()["histograms"]
    assert ([h.step for h in ea.Histograms("trainer/is_ratio")] if has_ratios else []) == trained
    assert [h.step for h in ea.Histograms("trainer/staleness")] == [m["step"] for m in lines]


def test_every_heldout_eval_writes_its_samples(finished_run):
    rows = [json.loads(x) for x in (finished_run / "samples.jsonl").read_text().splitlines()]
    versions = sorted({r["policy_version"] for r in rows})
    assert versions == [0, 2, 4]  # the initial eval, every 2 steps, and the last step's
    assert all(sum(r["policy_version"] == v for r in rows) == 3 for v in versions)
    assert all(set(r) >= {"prompt", "completion", "reward", "accuracy"} for r in rows)


def test_report_on_a_finished_run_writes_its_pictures_and_summary(finished_run, tmp_path):
    out = tmp_path / "report"
    cmd = [sys.executable, "-m", "llamarl_cli.main", "report", str(finished_run), str(finished_run),
           "--out", str(out)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    for png in ("accuracy_reward.png", "gantt.png", "offpolicy.png", "sync.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, png
    md = (out / "report.md").read_text()
    assert md.count("| run | state |") == 1 and md.count(f"| {finished_run.name} | finished | 4/4 |") == 2
