"""`llamarl train` with a user's environment by path, end to end on the tiny model: multi-turn
episodes (turns > 1), the env/* metrics, an environment that hangs on one example (its episodes
fail, counted; the run goes on) and no environment worker left after the run."""
from __future__ import annotations

import pytest

from test_runtime import metrics, processes_mentioning, train

ENV = '''
import time

class Env:
    """Two turns; then reward 1.0 when the last turn wrote a digit. Example 3 hangs."""
    def reset(self, example):
        self.turn = 0
        if example["id"].endswith("-3"):
            self.step = lambda text: time.sleep(60)
        return example["messages"]

    def step(self, text):
        self.turn += 1
        done = self.turn == 2
        reply = [] if done else [{"role": "user", "content": "again"}]
        return reply, float(any(c.isdigit() for c in text)) if done else None, done
'''
STOPS = "[" + ",".join("0123456789abcdefghij") + "]"  # turns end early on the untrained model


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("env")
    (tmp / "env_mod.py").write_text(ENV)
    run_dir = tmp / "run"
    out = train(run_dir, "run.max_steps=3", "algorithm.prompts_per_step=4", "algorithm.group_size=2",
                "data.num_train_examples=8", f"env.entry={tmp / 'env_mod.py'}:Env", "env.step_timeout_s=1",
                "env.max_episode_tokens=96", "generation.max_prompt_tokens=40", "generation.max_new_tokens=16",
                f"generation.stop_strings={STOPS}", "warmstart.steps=0", "run.eval_every_steps=0",
                "logging.tensorboard=false", "run.weight_checksums=false", timeout_s=240)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return run_dir, tmp


def test_episodes_take_several_turns_and_report_their_metrics(run):
    run_dir, _ = run
    lines = [m for m in metrics(run_dir) if "env/turns_mean" in m]
    assert len(lines) == 3
    assert max(m["env/turns_mean"] for m in lines) > 1.0
    for m in lines:
        assert {"env/tool_calls_mean", "env/tool_errors", "env/truncated_frac", "env/failed", "env/step_s"} <= set(m)
        assert 0.0 <= m["env/truncated_frac"] <= 1.0 and m["env/step_s"] >= 0.0


def test_a_hanging_environment_fails_its_episodes_and_the_run_goes_on(run):
    run_dir, _ = run
    assert sum(m.get("env/failed", 0) for m in metrics(run_dir)) >= 1  # example 3's episodes, when drawn
    log = (run_dir / "logs" / "generator_0.log").read_text()
    assert "an environment failed" in log and "did not finish within env.step_timeout_s=1 s" in log


def test_no_environment_worker_outlives_the_run(run):
    _, tmp = run  # its workers' command lines name the environment's file
    assert processes_mentioning(str(tmp / "env_mod.py")) == []
