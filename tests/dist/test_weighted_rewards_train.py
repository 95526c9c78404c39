"""data.rewards end to end: a short run on the built-in task with the task's reward plus a format
reward from a file. reward/<name>_mean is over the rows the reward role scored since the previous
line, reward/mean over trainer rank 0's batch: not the same rows here (2 actor ranks), so the check
is each term's key and range, and that the format term reached the metrics."""
from __future__ import annotations

from test_runtime import metrics, train

FORMAT = '''
def has_digits(completion, example):
    return float(any(c.isdigit() for c in completion))
'''


def test_a_weighted_run_logs_each_terms_mean_on_every_line(tmp_path):
    (tmp_path / "fmt.py").write_text(FORMAT)
    run_dir = tmp_path / "run"
    out = train(run_dir, "run.max_steps=3", "algorithm.max_offpolicy_steps=0", "logging.tensorboard=false",
                f"data.rewards=[{{fn: arith, weight: 1.0}}, {{fn: '{tmp_path}/fmt.py:has_digits', weight: 0.2}}]")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = metrics(run_dir)
    assert [m["step"] for m in lines] == [1, 2, 3]
    for m in lines:
        assert 0.0 <= m["reward/arith_mean"] <= 1.0 and 0.0 <= m["reward/has_digits_mean"] <= 1.0
        # every reward is 1 * arith + 0.2 * has_digits, so a batch mean is at most 1.2
        assert 0.0 <= m["reward/mean"] <= 1.2 and m["reward/errors"] == 0
    # the format term is not constant 0: the sum is not just the task's reward
    assert any(m["reward/has_digits_mean"] > 0 for m in lines)
