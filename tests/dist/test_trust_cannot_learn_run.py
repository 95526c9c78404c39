"""#44 case 5, for real: a custom reward that raises on every sample. The run used to exit 0
with reward 0.000; it now ends with exit 1, the exception's last line in the final message,
and summary.json and every metrics line say every reward errored."""
from __future__ import annotations

import json

import pytest

from test_runtime import metrics, processes_mentioning, train

REWARD = '''
def score(completion, example):
    raise ValueError("boom: this reward never scores")
'''


@pytest.mark.parametrize("k", [1, 0])  # async, and the colocated sync actor
def test_a_run_whose_every_reward_errors_exits_1_naming_the_error(tmp_path, k):
    (tmp_path / "reward.py").write_text(REWARD)
    run_dir = tmp_path / "run"
    out = train(run_dir, "run.max_steps=2", "algorithm.prompts_per_step=2", "algorithm.group_size=2",
                f"data.reward={tmp_path / 'reward.py'}:score", "logging.tensorboard=false",
                "run.weight_checksums=false", "resources.reward.workers=1",
                f"algorithm.max_offpolicy_steps={k}")
    text = out.stdout + out.stderr
    assert out.returncode == 1, text[-3000:]
    assert "every reward errored" in out.stderr and "ValueError: boom: this reward never scores" in out.stderr, \
        out.stderr[-3000:]
    lines = metrics(run_dir)
    assert [m["step"] for m in lines] == [1, 2]
    assert all(m["reward/errors"] == m["reward/scored"] > 0 for m in lines), lines
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["warnings"] == ["every reward errored at steps 1-2: ValueError: boom: this reward never scores"]
    assert "warning: every reward errored at steps 1-2" in out.stdout
    assert not processes_mentioning(str(run_dir))  # nothing left behind
