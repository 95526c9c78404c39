"""GSPO with the dual clip and Dr.GRPO's constant length normaliser train 2 steps in a real
`llamarl train` run (sync, k = 0): one run carries all three options, over 2 updates per batch so
the decoupled form (ratio to pi_old) runs too. The losses are hand-checked in
tests/unit/test_loss_options.py; here the whole path (config -> learner -> train step) runs."""
import math

from test_runtime import metrics, processes_mentioning, train

OPTS = ["run.max_steps=2", "algorithm.max_offpolicy_steps=0", "algorithm.name=gspo", "algorithm.advantage=mean",
        "algorithm.aggregation=token_mean", "algorithm.length_norm=constant", "algorithm.dual_clip_c=3.0",
        "algorithm.clip_eps_low=3e-4", "algorithm.clip_eps_high=4e-4", "algorithm.updates_per_batch=2"]


def test_gspo_with_dual_clip_and_the_constant_length_norm_trains_two_steps_with_finite_losses(tmp_path):
    done = train(tmp_path / "run", *OPTS)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    lines = metrics(tmp_path / "run")
    assert [m["step"] for m in lines] == [1, 2]
    for m in lines:
        assert math.isfinite(m["trainer/loss"])
        assert 0.0 <= m["trainer/dual_clip_frac"] <= 1.0
        assert 0.0 <= m["trainer/ppo_clip_frac"] <= 1.0
    assert processes_mentioning(str(tmp_path / "run")) == []
