"""Issue 49's loss and sampling options in one real `llamarl train` run (sync, k = 0, 2 steps):
GSPO with the dual clip and Dr.GRPO's constant length normaliser over 2 updates per batch (so the
decoupled form, ratio to pi_old, runs too), a k1 KL in the reward, TIS, and min_p with a
repetition penalty in the sampling. The losses are hand-checked in tests/unit/test_loss_options.py
and test_kl_and_mismatch.py, the sampling in test_min_p_repetition_penalty.py; here the whole path
(config -> generator -> learner -> train step) runs, and on-policy the trainer's pi of the
generator's tokens is their mu under the new sampling options: every first-update pi/mu is 1."""
import math

from test_runtime import metrics, processes_mentioning, train

OPTS = ["run.max_steps=2", "algorithm.max_offpolicy_steps=0", "algorithm.name=gspo", "algorithm.advantage=mean",
        "algorithm.length_norm=constant", "algorithm.dual_clip_c=3.0", "algorithm.clip_eps_low=3e-4",
        "algorithm.clip_eps_high=4e-4", "algorithm.updates_per_batch=2", "algorithm.kl_coef=0.05",
        "algorithm.kl_estimator=k1", "algorithm.kl_in=reward", "algorithm.mismatch=tis",
        "generation.temperature=0.8", "generation.min_p=0.05", "generation.repetition_penalty=1.2"]


def test_gspo_dual_clip_constant_norm_kl_in_reward_tis_min_p_and_repetition_penalty_train_on_policy(tmp_path):
    done = train(tmp_path / "run", *OPTS, timeout_s=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    lines = metrics(tmp_path / "run")
    assert [m["step"] for m in lines] == [1, 2]
    for m in lines:
        assert math.isfinite(m["trainer/loss"])
        assert 0.0 <= m["trainer/dual_clip_frac"] <= 1.0
        assert 0.0 <= m["trainer/ppo_clip_frac"] <= 1.0
        assert m["trainer/kl_reward_penalty_mean"] != 0.0 or m["trainer/kl"] == 0.0
        assert m["trainer/mismatch_masked_frac"] == 0.0  # tis truncates, never masks
        assert abs(m["trainer/is_ratio_max"] - 1.0) < 1e-5
        assert abs(m["trainer/is_ratio_mean"] - 1.0) < 1e-5
    assert processes_mentioning(str(tmp_path / "run")) == []
