"""The live panel while an eval runs and after the run: the eval bar counts rows as the engine
finishes them, the start accuracy stands beside the newest, and every way a run ends is said in
words on the panel (or as the console's last line without a terminal) and in summary.json."""
from __future__ import annotations

import json
import signal
from types import SimpleNamespace

import pytest
import torch
from rich.console import Console

from llamarl_cli.train_cmd import read_summary, report
from llamarl_core.data import Example
from llamarl_core.eval import evaluate
from llamarl_core.executors.trainer import TrainerExecutor
from llamarl_core.generation import GenerationEngine
from llamarl_core.models import ByteTokenizer, Llama, ModelArgs
from llamarl_core.observe import end_reason
from llamarl_core.observe.progress import ACCURACY_KEY, StoreProgress, accuracy_progress, publish_accuracy
from llamarl_core.rewards import get_reward
from llamarl_core.runtime.controller import Controller, Interrupted, _raise_interrupt
from llamarl_core.runtime.live_view import LiveView, render

ARGS = ModelArgs(vocab_size=260, dim=32, n_layers=1, n_heads=4, n_kv_heads=2, ffn_dim=48, max_seq_len=64)
METRICS = {"step": 42, "reward/mean": 0.3125, "trainer/step_s": 2.0}


def _text(renderable) -> str:
    console = Console(width=80, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


class Store:
    """The control plane's JSON keys, in a dict."""

    def __init__(self, **keys):
        self.keys = dict(keys)

    def set_json(self, key, value):
        self.keys[key] = json.loads(json.dumps(value))  # what the store's round trip keeps

    def get_json(self, key, default=None):
        return self.keys.get(key, default)

    def status(self, role, rank):
        return {}


def test_the_eval_bar_counts_each_row_as_the_engine_finishes_it_within_one_batch():
    torch.manual_seed(0)
    engine = GenerationEngine(Llama(ARGS).eval(), ByteTokenizer(), max_batch_size=64)
    examples = [Example(str(i), f"{i}+1", str(i + 1), source="arith") for i in range(6)]
    calls = []
    evaluate(engine, ByteTokenizer(), examples, get_reward("arith"), max_new_tokens=4,
             batch_size=64, progress=lambda done, total: calls.append((done, total)))
    # One batch holds all 6 rows: counted per batch, the bar would jump 0/6 → 6/6.
    assert calls == [(k, 6) for k in range(7)]
    text = _text(render(METRICS, {"eval": {"done": 3, "total": 6}}, {}, title="t", max_steps=150))
    assert "held-out eval" in text and "3/6" in text


def test_store_progress_writes_the_first_and_last_rows_and_throttles_between(monkeypatch):
    store, now = Store(), [100.0]
    monkeypatch.setattr("llamarl_core.observe.progress.time.monotonic", lambda: now[0])
    bar = StoreProgress(store, "eval")
    bar(0, 200)  # the start is always written: the bar appears at 0/200
    bar(1, 200)  # 0 s after the last write: skipped
    assert store.keys["progress/eval"] == {"done": 0, "total": 200}
    now[0] += 0.25
    bar(57, 200)
    assert store.keys["progress/eval"] == {"done": 57, "total": 200}
    bar(200, 200)  # the end is always written
    assert store.keys["progress/eval"]["done"] == 200


def test_the_panel_shows_the_start_accuracy_beside_the_newest_in_points():
    assert accuracy_progress({0: 0.5, 20: 0.6, 40: 0.735}) == {"start": 0.5, "latest": 0.735, "version": 40}
    store = Store(**{"metrics/latest": METRICS})
    publish_accuracy(store, {0: 0.5, 20: 0.6, 40: 0.735})
    assert store.keys[ACCURACY_KEY] == {"start": 0.5, "latest": 0.735, "version": 40}
    view = LiveView(Console(width=80, record=True, color_system=None, force_terminal=True))
    view.update(store, SimpleNamespace(roles=[]))
    text = _text(view._panel(*view.last_seen))
    assert "held-out accuracy 0.500 → 0.735 (+23.5)" in text
    # before RL only the first eval exists: one number
    assert "held-out accuracy 0.500 " in _text(render({}, {}, {}, title="t", max_steps=1,
                                                       accuracy=0.5))


def _trainer_end(version: int, max_steps: int, max_time_s: float) -> end_reason.EndReason:
    fake = SimpleNamespace(version=version, run_cfg=SimpleNamespace(max_steps=max_steps, max_time_s=max_time_s))
    return TrainerExecutor._end_reason(fake)


def test_the_trainer_says_whether_max_steps_or_the_time_limit_ended_the_run():
    assert _trainer_end(150, 150, 200).fields() == {"end_reason": "max_steps",
                                                   "end_detail": "run.max_steps=150 reached"}
    assert _trainer_end(150, 150, 0).reason == "max_steps"
    assert _trainer_end(143, 150, 200).fields() == {
        "end_reason": "max_time_s", "end_detail": "run.max_time_s=200 reached after 143 of 150 steps"}


def test_sigterm_is_an_interrupt_that_names_its_signal():
    with pytest.raises(KeyboardInterrupt) as caught:
        _raise_interrupt(signal.SIGTERM, None)
    assert isinstance(caught.value, Interrupted) and caught.value.signum == signal.SIGTERM
    assert end_reason.stopped_by_signal(signal.SIGTERM).detail == "stopped by SIGTERM"
    assert end_reason.stopped_by_signal(signal.SIGINT).fields() == {"end_reason": "signal",
                                                                   "end_detail": "stopped by SIGINT"}


def test_a_failed_role_is_named_in_the_controllers_end_reason(tmp_path):
    ctl = Controller.__new__(Controller)
    ctl.run_dir, ctl.ranks = str(tmp_path), [("generator", 0)]
    ctl.control = SimpleNamespace(abort=lambda reason: None, get_str=lambda key: "")
    result = ctl._failure("role generator rank 0 died (its torchrun exited with code 1)", "generator", 0)
    assert result.end.fields() == {
        "end_reason": "error", "end_role": "generator rank 0",
        "end_detail": "error in role generator rank 0: role generator rank 0 died (its torchrun exited with code 1)"}


@pytest.mark.parametrize("end, line", [
    (end_reason.reached_max_steps(150), "run ended: run.max_steps=150 reached"),
    (end_reason.reached_max_time(200, 143, 150), "run ended: run.max_time_s=200 reached after 143 of 150 steps"),
    (end_reason.stopped_by_signal(signal.SIGTERM), "run ended: stopped by SIGTERM"),
    (end_reason.failed("it broke", "trainer", 1), "run ended: error in role trainer rank 1: it broke"),
    (end_reason.failed("[/gloo/pair.cc:537] Connection closed by peer [127.0.0.1]:29500", "reward", 0),  # rich markup?
     "run ended: error in role reward rank 0: [/gloo/pair.cc:537] Connection closed by peer [127.0.0.1]:29500"),
])
def test_each_end_reason_is_written_to_summary_json_and_rendered(tmp_path, end, line):
    (tmp_path / "summary.json").write_text(json.dumps({"steps": 143, "accuracy_after": 0.7}))
    end_reason.record(str(tmp_path), end)
    summary = read_summary(str(tmp_path))
    assert summary["end_reason"] == end.reason and summary["steps"] == 143  # the trainer's keys kept
    assert end.reason in end_reason.END_REASONS
    assert end_reason.end_line(summary) == line
    # on a terminal: the panel's last frame has an "ended" row with the words
    view = LiveView(Console(width=80, record=True, color_system=None, force_terminal=True))
    view.update(Store(**{"metrics/latest": METRICS}), SimpleNamespace(roles=[]))
    words = line.removeprefix("run ended: ")
    panel = " ".join(_text(view._panel(*view.last_seen, ended=line)).split())
    assert f"ended {words[:40]}" in panel.replace("│", " ").replace("  ", " ")
    # the console's closing lines (what a run without a terminal shows): before "done"/"failed"
    out = tmp_path / "out.txt"
    with open(out, "w") as f:
        ok = end.reason in ("max_steps", "max_time_s")
        result = SimpleNamespace(ok=ok, run_dir=str(tmp_path), message="m", log_tail="", failed=None)
        report(result, Console(file=f, width=80))
    printed = out.read_text().splitlines()
    assert printed[0] == line
    assert printed[-1].startswith("done: ") if ok else len(printed) == 1


def test_a_failed_run_without_a_summary_gets_one_with_its_end_reason(tmp_path):
    end_reason.record(str(tmp_path), end_reason.stopped_by_signal(signal.SIGINT))
    assert read_summary(str(tmp_path)) == {"end_reason": "signal", "end_detail": "stopped by SIGINT"}
