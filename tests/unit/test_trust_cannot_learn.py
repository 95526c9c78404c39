"""#44 case 5: a run that cannot learn says so (group_size < 2, every reward errored, a constant
reward), in the config check, the metrics line, the live view, summary.json and the exit code."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from rich.console import Console

from llamarl_cli.main import main
from llamarl_cli.train_cmd import report
from llamarl_core.config.choices import ADVANTAGE_MODES
from llamarl_core.config.schema import LoggingConfig
from llamarl_core.observe.learning_signal import CONSTANT_REWARD_STEPS, LearningSignal, last_line
from llamarl_core.observe.metrics_log import MetricsLog
from llamarl_core.runtime import procs
from llamarl_core.runtime.live_view import PANEL_WIDTH, plain_line, render


def line(step, errors, scored, mean=0.0, std=0.0, timeouts=0, first_error=None):
    out = {"step": step, "reward/errors": errors, "reward/timeouts": timeouts, "reward/scored": scored,
           "reward/mean": mean, "reward/std": std}
    if first_error:
        out["reward/first_error"] = first_error
    return out


# ---- group_size < 2 ---------------------------------------------------------------------
@pytest.mark.parametrize("mode", ADVANTAGE_MODES)
def test_group_size_one_with_a_group_relative_advantage_is_refused_before_launch(mode, capsys, monkeypatch):
    monkeypatch.setattr(procs, "start_role", lambda cmd, *a, **k: pytest.fail(cmd))
    for verb in ("plan", "train"):
        code = main([verb, "recipe=cpu_tiny", "algorithm.group_size=1", f"algorithm.advantage={mode}"])
        err = capsys.readouterr().err.strip()
        assert code == 2, err
        assert "Traceback" not in err and len(err.splitlines()) == 1, err
        assert (f"algorithm.group_size=1: with a group-relative advantage (algorithm.advantage={mode}) "
                f"every advantage is 0, so nothing is learned; use >= 2") in err


def test_group_size_two_is_accepted(capsys):
    assert main(["plan", "recipe=cpu_tiny", "algorithm.group_size=2"]) == 0, capsys.readouterr().err


# ---- LearningSignal on hand-made metric sequences ------------------------------------------
def test_every_reward_erroring_is_one_span_named_with_the_first_errors_last_line():
    s = LearningSignal()
    tb = "Traceback (most recent call last):\n  File \"r.py\", line 2, in fn\nValueError: boom\n"
    for step in range(1, 4):  # 8 samples a step, all errored; the reward rank sends its last line
        s.observe(line(step, 8 * step, 8 * step, first_error=last_line(tb)))
    assert s.all_errored()
    assert s.warnings() == ["every reward errored at steps 1-3: ValueError: boom"]
    assert s.warnings(current_step=3) == s.warnings()
    assert "every reward errored (24 of 24 samples scored)" in s.failure()
    assert "ValueError: boom" in s.failure()


def test_a_step_with_one_good_sample_is_not_all_errored_and_splits_the_span():
    s = LearningSignal()
    s.observe(line(1, 8, 8))
    s.observe(line(2, 15, 16))   # 7 of this step's 8 errored: it can learn from one
    s.observe(line(3, 23, 24))   # all 8 of step 3 errored again
    assert not s.all_errored()   # 23 of 24 over the run
    assert s.warnings() == ["every reward errored at step 1", "every reward errored at step 3"]
    assert s.warnings(current_step=3) == ["every reward errored at step 3"]


def test_timeouts_count_as_errors_and_a_line_with_no_new_samples_keeps_the_last_verdict():
    s = LearningSignal()
    s.observe(line(1, 4, 8, timeouts=4))   # 4 raised + 4 timed out = all 8
    s.observe(line(2, 4, 8, timeouts=4))   # the reward rank has not published step 2 yet
    assert s.warnings() == ["every reward errored at steps 1-2"]
    assert s.all_errored()


def test_a_restarted_reward_rank_counting_from_zero_again_is_judged_on_its_new_counts():
    s = LearningSignal()
    s.observe(line(1, 0, 8))     # 8 good samples
    s.observe(line(2, 4, 4))     # the rank restarted: its 4 new samples all errored
    s.observe(line(3, 12, 12))
    assert s.warnings() == ["every reward errored at steps 2-3"]
    assert (s.failed, s.scored) == (12, 20) and not s.all_errored()


def test_no_reward_counters_never_warn_of_errors():
    s = LearningSignal()
    s.observe({"step": 1, "reward/mean": 0.5, "reward/std": 0.5})
    assert not s.all_errored() and s.warnings() == []


def test_a_constant_reward_is_named_after_enough_steps_in_a_row_and_not_before():
    n = CONSTANT_REWARD_STEPS
    s = LearningSignal()
    for step in range(1, n):
        s.observe(line(step, 0, 8 * step, mean=1.0, std=0.0))
    assert s.warnings() == []  # n - 1 steps: not yet
    s.observe(line(n, 0, 8 * n, mean=1.0, std=0.0))
    assert s.warnings(current_step=n) == [
        f"the reward was 1 for every sample at steps 1-{n} ({n} steps): nothing to learn from"]
    s.observe(line(n + 1, 0, 8 * n + 8, mean=0.5, std=0.5))  # the rewards differ again
    assert s.warnings(current_step=n + 1) == []
    assert len(s.warnings()) == 1  # the summary still tells the whole story


def test_a_change_of_constant_value_starts_a_new_run_of_steps():
    s = LearningSignal(constant_steps=3)
    for step, value in enumerate([0.0, 0.0, 1.0, 1.0, 1.0], start=1):
        s.observe(line(step, 0, 8 * step, mean=value, std=0.0))
    assert s.warnings() == ["the reward was 1 for every sample at steps 3-5 (3 steps): nothing to learn from"]


# ---- where the words show --------------------------------------------------------------
class FakeControl:
    def __init__(self):
        self.reward_stats, self.latest = {}, None

    def stats(self, role, rank):
        return self.reward_stats if role == "reward" else {}

    def set_json(self, key, value):
        self.latest = value


def test_metrics_line_and_live_view_carry_the_warning_and_the_counters(tmp_path):
    control = FakeControl()
    log = MetricsLog(str(tmp_path), control, {"reward": 1}, LoggingConfig(tensorboard=False))
    control.reward_stats = {"busy_s": 1.0, "idle_s": 1.0, "first_error": "ValueError: boom",
                            "pool": {"items": 8, "errors": 8, "timeouts": 0}}
    out = log.write({"step": 1, "reward/mean": 0.0, "reward/std": 0.0})
    log.close()
    assert out["reward/scored"] == 8 and out["reward/errors"] == 8
    assert "reward/first_error" not in out  # text goes to the words, not the metrics
    assert out["warnings"] == ["every reward errored at step 1: ValueError: boom"]
    assert control.latest["warnings"] == out["warnings"]  # the live view reads metrics/latest
    written = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert written["warnings"] == out["warnings"]
    assert plain_line(out).endswith("  warning: every reward errored at step 1: ValueError: boom")


def test_the_live_panel_shows_each_warning_in_words_within_its_width():
    m = {"step": 3, "reward/mean": 0.0, "warnings": ["every reward errored at steps 1-3: ValueError: boom"]}
    console = Console(width=PANEL_WIDTH, record=True)
    console.print(render(m, {}, {}, title="llamarl", max_steps=10))
    text = console.export_text()
    assert "warning" in text and "every reward errored at steps 1-3: ValueError: boom" in text
    assert max(len(l) for l in text.splitlines()) <= PANEL_WIDTH


def test_the_final_console_repeats_summary_warnings_for_a_failed_and_a_finished_run(tmp_path, capsys):
    (tmp_path / "summary.json").write_text(json.dumps({"warnings": ["every reward errored at steps 1-3"]}))
    console = Console(width=200)
    failed = SimpleNamespace(ok=False, run_dir=str(tmp_path), message="trainer: RewardsAllErrored",
                             log_tail="", failed=None)
    assert report(failed, console) == 1
    assert "warning: every reward errored at steps 1-3" in capsys.readouterr().out
    done = SimpleNamespace(ok=True, run_dir=str(tmp_path), message="done")
    assert report(done, console) == 0
    assert "warning: every reward errored at steps 1-3" in capsys.readouterr().out
