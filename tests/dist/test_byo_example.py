"""The "Bring your own task" example runs as its README prints it.

The command is read from examples/my_task/README.md (its first line starting `llamarl train`),
so the README, the recipe and this test cannot drift apart; a tiny budget (2 warm-start steps,
2 RL steps, 8 held-out rows) is appended as overrides. The run must exit 0 from the repository
root and log a reward from the example's own reward function on every step.
"""
from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "my_task"
TINY = ["warmstart.steps=2", "run.max_steps=2", "run.max_time_s=0", "run.eval_every_steps=0",
        "data.num_eval_examples=8", "algorithm.prompts_per_step=4", "algorithm.group_size=4",
        "controller.startup_timeout_s=90", "controller.heartbeat_timeout_s=20"]


def readme_command() -> list[str]:
    line = next(x for x in (EXAMPLE / "README.md").read_text().splitlines() if x.startswith("llamarl train"))
    return shlex.split(line)


def test_the_readme_command_is_the_recipe_of_the_example():
    assert readme_command() == ["llamarl", "train", "recipe=examples/my_task/recipe.yaml"]


def test_the_example_trains_two_rl_steps_and_logs_its_rewards(tmp_path):
    words = readme_command()[1:]  # `llamarl` is the console script of llamarl_cli.main
    cmd = [sys.executable, "-m", "llamarl_cli.main", *words, f"run.dir={tmp_path / 'run'}", *TINY]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "its last 8 rows are held out, the 3992 before them train" in out.stdout
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in lines if "reward/mean" in m]
    assert [m["step"] for m in steps] == [1, 2]
    # my_reward.py scores 0, 0.5 or 1, so a mean over 16 samples is a multiple of 1/32 in [0, 1]
    for m in steps:
        assert 0.0 <= m["reward/mean"] <= 1.0 and (m["reward/mean"] * 32) == round(m["reward/mean"] * 32)
        assert m["reward/scored"] > 0 and m["reward/errors"] == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert "accuracy" in json.dumps(summary)
