"""A real `llamarl train` run with generation.min_p and generation.repetition_penalty on, the KL
on (so every row trains: its untruncated path runs too): the loss is finite and, synchronous
(on-policy), the trainer's π of the generator's tokens is their μ: every pi/mu is 1."""
import math

from test_runtime import metrics, train


def test_a_synchronous_run_with_min_p_and_repetition_penalty_trains_on_policy(tmp_path):
    run_dir = tmp_path / "run"
    proc = train(run_dir, "run.max_steps=2", "algorithm.max_offpolicy_steps=0", "algorithm.kl_coef=0.05",
                 "generation.temperature=0.8", "generation.min_p=0.05", "generation.repetition_penalty=1.2",
                 timeout_s=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = metrics(run_dir)
    assert [m["step"] for m in lines] == [1, 2]
    for m in lines:
        assert m["trainer/trained_rows_frac"] > 0  # kl_coef > 0 trains every row
        assert math.isfinite(m["trainer/loss"])
        assert abs(m["trainer/is_ratio_max"] - 1.0) < 1e-5
        assert abs(m["trainer/is_ratio_mean"] - 1.0) < 1e-5
