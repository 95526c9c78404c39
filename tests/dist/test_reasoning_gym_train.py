"""`llamarl train data.name=reasoning_gym`: a few RL steps of the tiny model on one reasoning-gym
task, every reward from the task's own scorer in the reward workers (rewards/reasoning_gym_score.py)."""
import json

import pytest

from test_runtime import metrics, train

pytest.importorskip("reasoning_gym")


def test_a_short_run_on_a_reasoning_gym_task_completes_with_rewards_logged(tmp_path):
    run_dir = tmp_path / "run"
    out = train(run_dir, "run.max_steps=2", "data.name=reasoning_gym", "data.task=basic_arithmetic",
                "generation.max_prompt_tokens=192", "logging.trained_samples_per_step=4",
                "logging.tensorboard=false")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = metrics(run_dir)
    assert [m["step"] for m in lines] == [1, 2]
    assert all(0.0 <= m["reward/mean"] <= 1.0 and m["reward/errors"] == 0 for m in lines)
    samples = [json.loads(x) for x in (run_dir / "trained_samples.jsonl").read_text().splitlines()]
    # an untrained model writes no <answer> tags: the scorer gives 0, not an error
    assert samples and all(s["reward"] == 0.0 for s in samples if "<answer>" not in s["completion"])
