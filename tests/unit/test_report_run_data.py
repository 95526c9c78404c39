"""`llamarl report` reads a run that is still writing, and names a corrupt line."""
from __future__ import annotations

import json

import pytest

from llamarl_core.report.plots import step_window
from llamarl_core.report.run_data import load_run, read_jsonl_tolerant


def _write_run(run_dir, metrics_text: str):
    run_dir.mkdir()
    (run_dir / "plan.json").write_text(json.dumps(
        {"config": {"algorithm": {"prompts_per_step": 4, "group_size": 8}, "run": {"max_steps": 10}}}))
    (run_dir / "metrics.jsonl").write_text(metrics_text)


def test_a_half_written_last_line_is_skipped_and_samples_count_prompts_times_group(tmp_path):
    lines = [json.dumps({"step": s, "wall_s": 2.0 * s, "reward/mean": 0.1 * s}) for s in (1, 2)]
    _write_run(tmp_path / "r", "\n".join(lines) + '\n{"step": 3, "rew')
    run = load_run(str(tmp_path / "r"))
    assert [m["step"] for m in run.metrics] == [1, 2]
    assert run.samples_per_step == 32 and run.max_steps == 10 and not run.finished
    assert run.series("reward/mean") == ([1, 2], [pytest.approx(0.1), pytest.approx(0.2)])


def test_a_broken_line_inside_the_file_is_an_error_naming_file_and_line(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1}\n{oops\n{"step": 3}\n')
    with pytest.raises(ValueError, match=r"m\.jsonl:2: not a JSON line"):
        read_jsonl_tolerant(str(path))


def test_a_folder_that_is_not_a_run_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="is it a llamarl run directory"):
        load_run(str(tmp_path))


def test_the_gantt_window_is_the_last_n_training_steps():
    spans = [{"role": "trainer", "rank": 0, "state": "train", "t0": 10.0 * s, "t1": 10.0 * s + 4, "step": s}
             for s in range(6)]
    assert step_window(spans, 2) == (34.0, 54.0, 5, 6)  # from step 4's end to step 6's end
    assert step_window(spans, 10) == (0.0, 54.0, 1, 6)
    assert step_window([], 3) is None


def test_the_initial_eval_is_placed_at_its_wall_time_from_samples_jsonl(tmp_path):
    _write_run(tmp_path / "r", json.dumps({"step": 1, "wall_s": 40.0, "eval/accuracy": 0.5}) + "\n")
    (tmp_path / "r" / "samples.jsonl").write_text(
        json.dumps({"step": 0, "wall_s": 31.5, "accuracy": 0.25, "prompt": "1+1", "completion": "2"}) + "\n")
    assert load_run(str(tmp_path / "r")).accuracy == [(0, 31.5, 0.25), (1, 40.0, 0.5)]


def test_the_report_row_of_an_episode_run_has_its_turns_and_tool_call_rate(tmp_path):
    from llamarl_core.report.summary import markdown, run_row
    lines = [json.dumps({"step": s, "wall_s": 2.0 * s, "reward/mean": 0.1, "env/turns_mean": 1.0 + s / 4,
                         "env/tool_calls_mean": 0.25 * s}) for s in (1, 2)]
    _write_run(tmp_path / "r", "\n".join(lines) + "\n")
    _write_run(tmp_path / "plain", json.dumps({"step": 1, "wall_s": 2.0, "reward/mean": 0.1}) + "\n")
    episodes, plain = load_run(str(tmp_path / "r")), load_run(str(tmp_path / "plain"))
    row = run_row(episodes)
    assert row["turns (last)"] == "1.50" and row["tool calls (first → last)"] == "0.25 → 0.50"
    assert "turns (last)" not in run_row(plain)
    text = markdown([plain, episodes], [], str(tmp_path))
    assert "| tool calls (first → last) |" in text and "| – | – |" in text  # the plain run has none
