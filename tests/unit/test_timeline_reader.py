"""One reader of the timeline files (#46 item 3): the bench stats, the report and the scripts
read spans with `timeline_read.read_spans`, the idle rule is one IDLE_STATES, and the bench's
timeline and the report's gantt.png are drawn by one function."""
import json

import pytest

from llamarl_core.bench import plots as bench_plots
from llamarl_core.bench.run_stats import read_timeline
from llamarl_core.report import plots as report_plots
from llamarl_core.report.run_data import load_run
from llamarl_core.transport import idle, timeline, timeline_read

SPAN = {"role": "trainer", "rank": 0, "state": "train", "t0": 1.0, "t1": 2.5}


def _write(tmp_path, text):
    (tmp_path / "timeline").mkdir()
    (tmp_path / "timeline" / "trainer_0.jsonl").write_text(text)


def test_the_bench_reader_skips_a_last_line_still_being_written_like_the_report(tmp_path):
    _write(tmp_path, json.dumps(SPAN) + "\n" + '{"role": "trai')
    assert read_timeline(str(tmp_path)) == [SPAN]


def test_a_span_without_t1_is_one_error_naming_the_file_for_bench_and_report(tmp_path):
    _write(tmp_path, json.dumps({k: v for k, v in SPAN.items() if k != "t1"}) + "\n")
    with pytest.raises(ValueError, match=r"trainer_0\.jsonl: span 1 lacks a role, state, rank, t0 or t1"):
        read_timeline(str(tmp_path))
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(ValueError, match=r"trainer_0\.jsonl: span 1 lacks"):
        load_run(str(tmp_path))


def test_no_timeline_folder_is_an_error_for_the_bench_and_empty_for_the_report(tmp_path):
    with pytest.raises(FileNotFoundError, match="no timeline folder"):
        read_timeline(str(tmp_path))
    assert timeline_read.read_spans(str(tmp_path), missing_ok=True) == []


def test_idle_states_and_the_gantt_are_each_defined_once():
    assert idle.IDLE_STATES is timeline.IDLE_STATES
    assert idle.TimelineTail is timeline_read.TimelineTail
    assert report_plots.draw_gantt is bench_plots.draw_gantt
