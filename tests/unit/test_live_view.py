"""The live panel and the plan's tables fit an 80-column terminal with every header whole."""
from __future__ import annotations

import os
import re

import pytest
from rich.console import Console

from llamarl_cli.render import print_plan
from llamarl_core.config.load import list_recipes, load_config, required_keys
from llamarl_core.plan.plan import make_plan
from llamarl_core.runtime.live_view import LiveView, bar, duration, eta_s, plain_line, render

METRICS = {"step": 42, "wall_s": 120.0, "policy_version": 42, "reward/mean": 0.3125,
           "trainer/staleness_mean": 1.0, "trainer/staleness_max": 1.0, "trainer/is_ratio_max": 4.34,
           "sync/seconds": 0.00194, "sync/gbps": 5.16, "trainer/step_s": 2.66, "trainer/busy_frac": 0.96,
           "generator/busy_frac": 0.55, "reward/busy_frac": 0.01, "restarts/generator": 1}


def _text(renderable) -> str:
    console = Console(width=80, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_bar_and_duration_are_exact():
    assert bar(0.25, 8) == "██░░░░░░"
    assert bar(1.7, 4) == "████" and bar(-1, 4) == "░░░░"
    assert duration(59) == "0m59s" and duration(3725) == "1h02m" and duration(None) == "–"


def test_eta_is_remaining_steps_at_the_mean_step_time_capped_by_the_time_limit():
    m = {"step": 10, "trainer/step_s": 9.0}
    assert eta_s(m, max_steps=50, max_time_s=0, rl_elapsed_s=30.0) == pytest.approx(40 * 3.0)
    assert eta_s(m, max_steps=50, max_time_s=100, rl_elapsed_s=30.0) == pytest.approx(70.0)
    assert eta_s({"step": 0}, 50, 0, None) is None


def test_live_panel_fits_80_columns_with_whole_labels_and_bars():
    progress = {"warmstart": {"done": 60, "total": 120}, "eval": {"done": 200, "total": 200}}
    statuses = {("trainer", 0): {"state": "train"}, ("generator", 0): {"state": "generate"},
                ("generator", 1): {"state": "sync"}, ("reward", 0): {"state": "wait"}}
    text = _text(render(METRICS, progress, statuses, title="llamarl · cpu_tiny", max_steps=150,
                        accuracy=0.485, rl_elapsed_s=84.0))
    lines = text.rstrip("\n").split("\n")
    assert max(len(line) for line in lines) <= 80
    assert "…" not in text
    for label in ("step", "reward", "held-out accuracy 0.485", "staleness", "IS ratio max 4.34",
                  "sync", "1.9 ms", "trainer busy", "generator busy", "reward busy", "warm start",
                  "60/120", "restarts", "generator 1", "42/150"):
        assert label in text, label
    assert "held-out eval" not in text  # finished phases leave the panel
    assert re.search(r"trainer busy\s+█{23}░ +96%", text)
    assert "generator 1 generate, 1 sync" in text


def test_without_a_terminal_one_plain_line_per_step(tmp_path):
    class Control:
        def __init__(self):
            self.latest = {}

        def get_json(self, key, default=None):
            return self.latest if key == "metrics/latest" else default

        def status(self, role, rank):
            return {}

    class Plan:
        roles = []

    console = Console(file=open(tmp_path / "out.txt", "w"), width=80)
    control = Control()
    with LiveView(console) as view:
        for step in (1, 1, 2):
            control.latest = {**METRICS, "step": step}
            view.update(control, Plan())
    console.file.close()
    out = (tmp_path / "out.txt").read_text().splitlines()
    assert out == [plain_line({**METRICS, "step": 1}), plain_line({**METRICS, "step": 2})]


def test_the_plain_line_names_restarts_only_once_there_were_some():
    assert plain_line({**METRICS, "step": 3}).endswith("  restarts generator 1")
    assert "restarts" not in plain_line({**METRICS, "step": 3, "restarts/generator": 0})


@pytest.mark.parametrize("recipe", list_recipes())
def test_plan_tables_fit_80_columns_with_whole_headers(recipe, tmp_path):
    given = {}
    if "model.checkpoint" in required_keys(recipe):  # recipe hf: the user's model, here a tiny Qwen2.5
        from hf_tiny import save_tiny
        given["model.checkpoint"] = str(save_tiny("qwen2.5", tmp_path / "qwen", max_position_embeddings=1024))
    cfg = load_config(recipe, [f"{key}={given.get(key, 'absent')}" for key in required_keys(recipe)])
    if cfg.model.checkpoint and not os.path.isdir(cfg.model.checkpoint):
        pytest.skip(f"{recipe}: {cfg.model.checkpoint} is absent (`llamarl models get smollm2-135m models/smollm2-135m`)")
    console = Console(width=80, record=True, color_system=None)
    print_plan(make_plan(cfg, require_data=False), console)
    text = console.export_text()
    header_lines = [line for line in text.splitlines() if line.startswith("role ")]
    assert len(header_lines) == 2, text
    layout, memory = (line.split() for line in header_lines)
    assert layout == ["role", "ranks", "nodes", "tp", "dp", "fsdp", "pp", "dtype", "quant", "threads"]
    assert memory == ["role", "weights", "grads", "optimizer", "activ.", "kv", "cache", "total",
                      "capacity", "fits"]
    rows = [line for line in text.splitlines() if re.match(r"(generator|trainer|reward|actor) ", line)]
    assert rows and all("…" not in row for row in rows)


def test_an_episode_run_shows_its_turns_and_tool_calls_in_the_panel_and_the_line():
    m = {**METRICS, "env/turns_mean": 2.25, "env/tool_calls_mean": 1.5, "env/tool_errors": 3,
         "env/truncated_frac": 0.125, "env/step_s": 0.04}
    text = _text(render(m, {}, {}, title="llamarl · agent", max_steps=150, accuracy=0.5, rl_elapsed_s=84.0))
    assert max(len(line) for line in text.rstrip("\n").split("\n")) <= 80
    assert re.search(r"episodes\s+turns 2\.25  tool calls 1\.50  errors 3  cut 0\.12  env 0\.04 s", text)
    assert "turns 2.25  tool calls 1.50" in plain_line(m)
    assert "episodes" not in _text(render(METRICS, {}, {}, title="t", max_steps=150, accuracy=0.5,
                                          rl_elapsed_s=84.0))
